"""Models: the ``LLMAdapter`` seam and its adapters.

``base`` (the seam and its request/response types), ``openai`` (OpenAI-compatible
chat completions over httpx; ``openai_errors`` words its failures: the model,
the endpoint, the fix), ``anthropic`` and ``google`` (Anthropic's Messages API
and the Gemini API on their official SDKs, the ``anthropic`` and ``google``
extras; ``native_errors`` words their failures), ``scripted`` (a deterministic
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
    from helix_agents.models.replay import (
        Divergence as Divergence,
        ReplayLLM as ReplayLLM,
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
    "NamedModel": "helix_agents.models.names",
    "model_from_name": "helix_agents.models.names",
    "OpenAIChatLLM": "helix_agents.models.openai",
    "AnthropicLLM": "helix_agents.models.anthropic",
    "GeminiLLM": "helix_agents.models.google",
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
    "NamedModel",
    "model_from_name",
    "OpenAIChatLLM",
    "AnthropicLLM",
    "GeminiLLM",
    "Divergence",
    "ReplayLLM",
    "ScriptStep",
    "ScriptedLLM",
]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
