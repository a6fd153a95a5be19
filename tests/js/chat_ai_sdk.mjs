// Chats with a helix-agents agent the way useChat does: the `ai` package's
// DefaultChatTransport.sendMessages POSTs {id, messages, trigger} to /sse?format=ai-sdk and
// readUIMessageStream builds the assistant message; prints it as JSON.
//
//   node chat_ai_sdk.mjs BASE_URL CHAT_ID AGENT_TYPE [ANSWER_JSON]
//
// With ANSWER_JSON, each client tool the reply leaves waiting gets that output, as
// addToolResult does, and the messages are sent again: the reply goes on in the same
// assistant message.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [base, chatId, agentType, answer] = process.argv.slice(2);
const transport = new DefaultChatTransport({
  api: `${base}/sse?format=ai-sdk&agentType=${encodeURIComponent(agentType)}`,
});
const user = { id: "user-1", role: "user", parts: [{ type: "text", text: "go" }] };

async function send(messages, last) {
  const errors = [];
  let message = last;
  try {
    const stream = await transport.sendMessages({
      chatId,
      messages,
      trigger: "submit-message",
      messageId: undefined,
      abortSignal: undefined,
    });
    for await (const snapshot of readUIMessageStream({
      stream,
      message: last,
      onError: (error) => errors.push(String(error?.message ?? error)),
    })) {
      message = snapshot;
    }
  } catch (error) {
    errors.push(String(error?.message ?? error));
  }
  return { message: structuredClone(message), errors };
}

const replies = [await send([user], undefined)];
if (answer !== undefined && replies[0].message !== undefined) {
  const assistant = structuredClone(replies[0].message);
  // The tool parts the server waits for: data-input-required lists them (a descendant's
  // call is `<owner>:<id>` on the stream).
  const waiting = new Set(
    assistant.parts
      .filter((part) => part.type === "data-input-required")
      .flatMap((part) => part.data.pending)
      .map((p) => (p.ownerSessionId === chatId ? p.toolCallId : `${p.ownerSessionId}:${p.toolCallId}`)),
  );
  for (const part of assistant.parts) {
    if (part.type.startsWith("tool-") && waiting.has(part.toolCallId)) {
      part.state = "output-available";
      part.output = JSON.parse(answer);
    }
  }
  replies.push(await send([user, assistant], assistant));
}
process.stdout.write(JSON.stringify({ replies }));
