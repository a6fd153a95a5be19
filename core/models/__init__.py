"""Models: the ``LLMAdapter`` seam and its adapters.

``base`` (the seam and its request/response types), ``openai`` (OpenAI-compatible
chat completions over httpx), ``openai_responses`` (OpenAI's Responses API over
httpx; ``openai_errors`` posts their calls and words their failures: the model,
the endpoint, the fix), ``anthropic`` and ``google`` (Anthropic's Messages API
and the Gemini API on their official SDKs, the ``anthropic`` and ``google``
extras; ``native_errors`` words their failures), ``connections`` (an adapter's
HTTP client per event loop, its call limit), ``retrying`` (retries of a failed
call, for every adapter), ``fallback`` (models tried in turn), ``scripted`` (a deterministic
model for tests and demos), ``replay`` (answers from recorded logs), ``names``
(``"openai:gpt-4o-mini"`` to an adapter that reads the environment when it
runs). May import the log and the agents' tool types; never the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_agents._exports import lazy_exports

if TYPE_CHECKING:
    from helix_agents.models.anthropic import (
        AnthropicLLM as AnthropicLLM,
    )
    from helix_agents.models.base import (
        FINISH_TOOL_NAME as FINISH_TOOL_NAME,
        LLMAdapter as LLMAdapter,
        LLMError as LLMError,
        LLMErrorKind as LLMErrorKind,
        LLMReasoningDelta as LLMReasoningDelta,
        LLMRequest as LLMRequest,
        LLMResponse as LLMResponse,
        LLMStreamEvent as LLMStreamEvent,
        LLMTextDelta as LLMTextDelta,
        LLMToolCallDelta as LLMToolCallDelta,
        TokenUsage as TokenUsage,
        ToolSpec as ToolSpec,
    )
    from helix_agents.models.fallback import (
        FALLBACK_KINDS as FALLBACK_KINDS,
        FallbackModel as FallbackModel,
    )
    from helix_agents.models.google import (
        GeminiLLM as GeminiLLM,
    )
    from helix_agents.models.names import (
        NamedModel as NamedModel,
        model_from_name as model_from_name,
    )
    from helix_agents.models.openai import (
        OpenAIChatLLM as OpenAIChatLLM,
    )
    from helix_agents.models.openai_responses import (
        OpenAIResponsesLLM as OpenAIResponsesLLM,
    )
    from helix_agents.models.replay import (
        Divergence as Divergence,
        ReplayLLM as ReplayLLM,
    )
    from helix_agents.models.retrying import (
        RETRY_KINDS as RETRY_KINDS,
        RetryingLLM as RetryingLLM,
        RetryPolicy as RetryPolicy,
    )
    from helix_agents.models.scripted import (
        ScriptedLLM as ScriptedLLM,
        ScriptStep as ScriptStep,
    )

_HOMES = {
    "FINISH_TOOL_NAME": "helix_agents.models.base",
    "LLMAdapter": "helix_agents.models.base",
    "LLMError": "helix_agents.models.base",
    "LLMRequest": "helix_agents.models.base",
    "LLMErrorKind": "helix_agents.models.base",
    "LLMReasoningDelta": "helix_agents.models.base",
    "LLMResponse": "helix_agents.models.base",
    "LLMStreamEvent": "helix_agents.models.base",
    "LLMTextDelta": "helix_agents.models.base",
    "LLMToolCallDelta": "helix_agents.models.base",
    "TokenUsage": "helix_agents.models.base",
    "ToolSpec": "helix_agents.models.base",
    "FALLBACK_KINDS": "helix_agents.models.fallback",
    "FallbackModel": "helix_agents.models.fallback",
    "NamedModel": "helix_agents.models.names",
    "model_from_name": "helix_agents.models.names",
    "OpenAIChatLLM": "helix_agents.models.openai",
    "AnthropicLLM": "helix_agents.models.anthropic",
    "GeminiLLM": "helix_agents.models.google",
    "OpenAIResponsesLLM": "helix_agents.models.openai_responses",
    "RETRY_KINDS": "helix_agents.models.retrying",
    "RetryPolicy": "helix_agents.models.retrying",
    "RetryingLLM": "helix_agents.models.retrying",
    "Divergence": "helix_agents.models.replay",
    "ReplayLLM": "helix_agents.models.replay",
    "ScriptStep": "helix_agents.models.scripted",
    "ScriptedLLM": "helix_agents.models.scripted",
}
__all__ = [
    "FINISH_TOOL_NAME",
    "LLMAdapter",
    "LLMError",
    "LLMRequest",
    "LLMErrorKind",
    "LLMReasoningDelta",
    "LLMResponse",
    "LLMStreamEvent",
    "LLMTextDelta",
    "LLMToolCallDelta",
    "TokenUsage",
    "ToolSpec",
    "FALLBACK_KINDS",
    "FallbackModel",
    "NamedModel",
    "model_from_name",
    "OpenAIChatLLM",
    "AnthropicLLM",
    "GeminiLLM",
    "OpenAIResponsesLLM",
    "RETRY_KINDS",
    "RetryPolicy",
    "RetryingLLM",
    "Divergence",
    "ReplayLLM",
    "ScriptStep",
    "ScriptedLLM",
]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
