"""An :class:`~helix_agents.models.base.LLMAdapter` on the Gemini API (the ``google`` extra).

:class:`GeminiLLM` streams ``models/{model}:streamGenerateContent?alt=sse``
through Google's official SDK (``google-genai``; its retries and automatic
function calling off: the run loop runs the tools, the shared retry layer
retries by an :class:`~helix_agents.models.base.LLMError`'s ``kind``). Text
parts become text deltas, thought parts reasoning deltas, each function call
(Gemini sends calls whole) one tool-call delta with its whole arguments; the
thought signatures are kept on the turn and sent back where they came from.
Every failure is one ``LLMError`` line (``native_errors.py`` words them).
specs/llm.md has the mapping tables.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Self, assert_never, cast

import httpx
import msgspec
from google import genai
from google.genai import types

from helix_agents.errors import UsageError
from helix_agents.messages import (
    AssistantMessage,
    Message,
    ReasoningPart,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from helix_agents.models.base import (
    LLMError,
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    LLMToolCallDelta,
    TokenUsage,
)
from helix_agents.models.native_errors import Where, gemini_error

__all__ = ["API_KEY_ENVS", "BASE_URL_ENV", "GEMINI_URL", "GENERATED_ID_PREFIX", "GeminiLLM"]

API_KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
"""The environment variables the API key is read from, in order, when none is given."""
BASE_URL_ENV = "GOOGLE_GEMINI_BASE_URL"
"""The environment variable the API root is read from when none is given (the SDK's own)."""
GEMINI_URL = "https://generativelanguage.googleapis.com"
"""The API root when neither ``base_url`` nor ``GOOGLE_GEMINI_BASE_URL`` is given."""
GENERATED_ID_PREFIX = "gemini_call_"
"""How the id of a call Gemini sent without one starts (such ids are never sent back)."""

PROVIDER = "google"
# the ReasoningPart.provider of the thoughts and signatures this adapter keeps (and sends back)
_REFUSED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "MODEL_ARMOR",
    }
)
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}


class GeminiLLM:
    """A Gemini model on the Gemini API, streamed through Google's official SDK.

    One HTTP client per adapter (an ``httpx.AsyncClient``, so the SDK never
    switches to aiohttp and its implicit retries). Use it as an async context
    manager, or call :meth:`aclose`, to close it.

    Args:
        model: The model sent when a request names none (``"gemini-2.5-flash"``).
        api_key: The key; defaults to ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY``.
        base_url: The API root; defaults to ``GOOGLE_GEMINI_BASE_URL``, else Google's.
        api_version: The API version in the path (``v1beta``: thinking and
            thought signatures are there first).
        thinking_budget: Tokens the model may think (``0`` turns thinking off
            where the model allows, ``-1`` lets it decide); ``None`` sends none.
        include_thoughts: Ask for thought summaries, streamed as reasoning.
        temperature: Default sampling temperature; a request's own wins.
        max_tokens: Default output limit; a request's own wins.
        timeout: Seconds for the whole call.
        headers: Extra headers sent with every request.

    Raises:
        UsageError: no API key (given or in the environment), or a
            ``base_url`` that is not an http(s) URL.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = "v1beta",
        thinking_budget: int | None = None,
        include_thoughts: bool = True,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float = 600.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        key, key_from = api_key, "api_key" if api_key is not None else None
        for name in API_KEY_ENVS:
            if key is None and os.environ.get(name):
                key, key_from = os.environ[name], name
        if not key:
            raise UsageError(
                f"GeminiLLM({model!r}) needs an API key: set {' or '.join(API_KEY_ENVS)} "
                "(or give api_key=)"
            )
        url_from: str | None = "base_url" if base_url is not None else None
        if base_url is None and os.environ.get(BASE_URL_ENV):
            base_url, url_from = os.environ[BASE_URL_ENV], BASE_URL_ENV
        root = (base_url or GEMINI_URL).rstrip("/")
        if not root.startswith(("http://", "https://")) or root.endswith("://"):
            raise UsageError(f"{url_from or 'base_url'} must be an http(s) URL, not {base_url!r}")
        self.model = model
        self._where = Where(
            provider="Gemini",
            endpoint=f"{root}/{api_version}/models/{model}:streamGenerateContent",
            root=root,
            key_envs=API_KEY_ENVS,
            url_from=url_from,
            key_from=key_from,
        )
        self._thinking_budget = thinking_budget
        self._include_thoughts = include_thoughts
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._http = httpx.AsyncClient()
        self._client = genai.Client(
            vertexai=False,
            api_key=key,
            http_options=types.HttpOptions(
                base_url=root + "/",
                api_version=api_version,
                timeout=int(timeout * 1000),
                headers=dict(headers or {}),
                retry_options=types.HttpRetryOptions(attempts=1),
                httpx_async_client=self._http,
            ),
        )

    def __repr__(self) -> str:
        # never the key
        return f"<GeminiLLM model={self.model!r} endpoint={self._where.endpoint!r}>"

    async def aclose(self) -> None:
        """Close the HTTP clients; idempotent."""
        await self._http.aclose()
        self._client.close()  # the sync client the SDK made for itself

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """Call the model: yield text, reasoning and tool-call pieces, then one response.

        Raises:
            LLMError: the call failed, the stream broke off, the reply was
                blocked (``refused``) or held a malformed call (``kind`` says
                which; ``model``, ``endpoint`` and ``hint`` are set). Not retried here.
        """
        return self._stream(request)

    async def _stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        model = request.model or self.model
        turn = _Turn(model, request)
        try:
            chunks = await self._client.aio.models.generate_content_stream(
                model=model, contents=_contents(request.messages), config=self.config(request)
            )
            # An async generator: closed at once when we are (its response with it), not by GC.
            async with aclosing(cast(AsyncGenerator[types.GenerateContentResponse], chunks)):
                async for chunk in chunks:
                    for piece in turn.feed(chunk):
                        yield piece
            yield turn.response()
        except LLMError as exc:
            exc.model, exc.endpoint = exc.model or model, exc.endpoint or self._where.endpoint
            raise
        except Exception as exc:
            failure = gemini_error(exc, self._where, model, started=turn.started)
            if failure is None:
                raise
            raise failure from exc

    def config(self, request: LLMRequest) -> types.GenerateContentConfig:
        """The generation config for ``request`` (system instruction, tools, limits, thinking)."""
        system = [request.system_prompt] if request.system_prompt else []
        system += [
            m.content for m in request.messages if isinstance(m, SystemMessage) and m.content
        ]
        tools: list[types.ToolUnion] = [
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name=tool.name,
                        description=tool.description,
                        parameters_json_schema=tool.parameters
                        or {"type": "object", "properties": {}},
                    )
                    for tool in request.tools
                ]
            )
        ]
        thinking = None
        if self._include_thoughts or self._thinking_budget is not None:
            thinking = types.ThinkingConfig(
                include_thoughts=self._include_thoughts or None,
                thinking_budget=self._thinking_budget,
            )
        temperature = request.temperature if request.temperature is not None else self._temperature
        return types.GenerateContentConfig(
            system_instruction="\n\n".join(system) or None,
            tools=tools if request.tools else None,
            temperature=temperature,
            max_output_tokens=request.max_tokens or self._max_tokens,
            thinking_config=thinking,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )


# --- our conversation -> Gemini's contents -------------------------------------------------


def _contents(messages: list[Message]) -> list[types.Content]:
    """Gemini's contents: ``user`` and ``model`` turns, consecutive turns of one role merged."""
    contents: list[types.Content] = []
    for message in messages:
        role, parts = _parts(message)
        if not parts:
            continue
        if contents and contents[-1].role == role:
            (contents[-1].parts or []).extend(parts)
        else:
            contents.append(types.Content(role=role, parts=parts))
    return contents


def _parts(message: Message) -> tuple[str, list[types.Part]]:
    match message:
        case UserMessage():
            return "user", [types.Part(text=message.content)] if message.content else []
        case ToolResultMessage():
            key = "error" if message.is_error else "output"
            response = types.FunctionResponse(
                id=_sent_id(message.tool_call_id),
                name=message.tool_name,
                response={key: message.content},
            )
            return "user", [types.Part(function_response=response)]
        case AssistantMessage():
            return "model", _model_parts(message)
        case SystemMessage():  # the system instruction, in GeminiLLM.config
            return "user", []
        case _:
            assert_never(message)


def _model_parts(message: AssistantMessage) -> list[types.Part]:
    """The turn's thoughts, text and calls, each thought signature back on its own part."""
    reasoning = [] if isinstance(message.reasoning, msgspec.UnsetType) else message.reasoning
    kept = [part for part in reasoning if part.provider == PROVIDER]
    parts = [
        types.Part(text=part.text, thought=True, thought_signature=_signature(part))
        for part in kept
        if part.data.get("on", "thought") == "thought" and (part.text or _signature(part))
    ]
    signed = {part.data.get("on"): _signature(part) for part in kept}
    if message.content or signed.get("text"):
        parts.append(types.Part(text=message.content, thought_signature=signed.get("text")))
    for call in message.tool_calls:
        function_call = types.FunctionCall(
            id=_sent_id(call.id),
            name=call.name,
            args=call.arguments if isinstance(call.arguments, dict) else {},
        )
        parts.append(
            types.Part(function_call=function_call, thought_signature=signed.get(f"call:{call.id}"))
        )
    return parts


def _signature(part: ReasoningPart) -> bytes | None:
    encoded = part.data.get("signature")
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        return None


def _sent_id(call_id: str) -> str | None:
    """A call's id as Gemini knows it: its own, never one we made up."""
    return None if call_id.startswith(GENERATED_ID_PREFIX) else call_id


# --- Gemini's stream -> our pieces ------------------------------------------------------


class _Turn:
    """Folds the stream's chunks into pieces as they come and one response at the end."""

    def __init__(self, model: str, request: LLMRequest) -> None:
        self.model = model
        self.request = request
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.reasoning: list[ReasoningPart] = []
        self.thinking = False  # the last part was a thought: the next one continues it
        self.finish: str | None = None
        self.finish_message: str | None = None
        self.blocked: str | None = None
        self.usage: types.GenerateContentResponseUsageMetadata | None = None
        self.response_id = ""
        self.started = False

    def feed(self, chunk: types.GenerateContentResponse) -> list[LLMStreamEvent]:
        """The pieces ``chunk`` carries, folding it into the turn."""
        self.model = chunk.model_version or self.model
        self.response_id = chunk.response_id or self.response_id
        self.usage = chunk.usage_metadata or self.usage
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self.blocked = str(feedback.block_reason.value)
        pieces: list[LLMStreamEvent] = []
        for candidate in chunk.candidates or []:
            if candidate.finish_reason is not None:
                self.finish = str(candidate.finish_reason.value)
                self.finish_message = candidate.finish_message or self.finish_message
            content = candidate.content
            for part in (content.parts if content is not None else None) or []:
                pieces.extend(self._part(part))
            break  # one candidate asked for
        self.started = self.started or bool(pieces)
        return pieces

    def _part(self, part: types.Part) -> list[LLMStreamEvent]:
        signature = (
            base64.b64encode(part.thought_signature).decode() if part.thought_signature else None
        )
        if part.thought:
            text = part.text or ""
            last = self.reasoning[-1] if self.thinking and self.reasoning else None
            if last is not None and not (signature and "signature" in last.data):
                data = {**last.data, "signature": signature} if signature else last.data
                self.reasoning[-1] = ReasoningPart(
                    text=last.text + text, provider=PROVIDER, data=data
                )
            else:
                data = {"signature": signature} if signature else {}
                self.reasoning.append(ReasoningPart(text=text, provider=PROVIDER, data=data))
            self.thinking = True
            return [LLMReasoningDelta(text=text)] if text else []
        self.thinking = False
        if part.function_call is not None:
            return [self._call(part.function_call, signature)]
        if signature:
            self.reasoning.append(
                ReasoningPart(provider=PROVIDER, data={"signature": signature, "on": "text"})
            )
        if part.text:
            self.text.append(part.text)
            return [LLMTextDelta(text=part.text)]
        return []

    def _call(self, call: types.FunctionCall, signature: str | None) -> LLMToolCallDelta:
        index = len(self.calls)
        name = call.name or ""
        arguments = call.args or {}
        call_id = call.id or self._generated_id(index, name)
        self.calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        if signature:
            on = f"call:{call_id}"
            self.reasoning.append(
                ReasoningPart(provider=PROVIDER, data={"signature": signature, "on": on})
            )
        raw = msgspec.json.encode(arguments).decode()
        return LLMToolCallDelta(index=index, id=call_id, name=name, arguments=raw)

    def _generated_id(self, index: int, name: str) -> str:
        """A call id from the reply and the request: the same reply gets the same ids."""
        seed = "|".join(
            (
                self.response_id,
                self.request.session_id or "",
                str(len(self.request.messages)),
                str(index),
                name,
            )
        )
        return GENERATED_ID_PREFIX + hashlib.sha256(seed.encode()).hexdigest()[:24]

    def response(self) -> LLMResponse:
        """The whole turn.

        Raises:
            LLMError: the prompt or the reply was blocked (``refused``), the
                stream ended before a finish reason (``connection``), the model
                wrote a malformed call or nothing at all (``bad_reply``).
        """
        if self.blocked is not None or self.finish in _REFUSED:
            why = (
                f"prompt blocked: {self.blocked}"
                if self.blocked
                else f"finish_reason {self.finish}"
            )
            raise LLMError(f"Gemini refused to answer ({why})", kind="refused")
        if self.finish is None:
            raise LLMError(
                "the stream ended before a finish reason: the reply is cut short",
                kind="connection",
                retryable=True,
            )
        if self.finish == "MALFORMED_FUNCTION_CALL":
            detail = f": {self.finish_message}" if self.finish_message else ""
            raise LLMError(
                f"the model wrote a malformed function call (finish_reason {self.finish}){detail}",
                kind="bad_reply",
                retryable=True,
            )
        content = "".join(self.text)
        if not content and not self.calls:
            limit = self.finish == "MAX_TOKENS"
            raise LLMError(
                f"the reply holds no text and no function call (finish_reason {self.finish})",
                kind="bad_reply",
                retryable=not limit,
                hint="the output limit came first: raise max_tokens" if limit else None,
            )
        finish = "tool_calls" if self.calls else _FINISH.get(self.finish, self.finish)
        return LLMResponse(
            content=content,
            tool_calls=self.calls,
            usage=self._usage(),
            finish_reason=finish,
            model=self.model,
            reasoning=[part for part in self.reasoning if part.text or part.data],
        )

    def _usage(self) -> TokenUsage | None:
        usage = self.usage
        if usage is None:
            return None
        thoughts = usage.thoughts_token_count or 0
        return TokenUsage(
            input_tokens=(usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0),
            output_tokens=(usage.candidates_token_count or 0) + thoughts,
            cached_input_tokens=usage.cached_content_token_count or 0,
            reasoning_tokens=thoughts,
        )
