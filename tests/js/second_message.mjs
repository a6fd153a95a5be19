// Sends a front end's second user message to a session whose first answer still streams,
// with a multitask choice, through the real client libraries; prints what came back, as JSON.
//
//   node second_message.mjs BASE_URL FORMAT SESSION_ID MULTITASK
//
// ai-sdk: the `ai` package's DefaultChatTransport, its `body` option carrying
// {multitask} (what useChat's `body` does), read by readUIMessageStream.
// ag-ui: @ag-ui/client's HttpAgent, runAgent({forwardedProps: {multitask}}).
// Prints {text, errors}: the text of the answer, and what failed.
import { DefaultChatTransport, readUIMessageStream } from "ai";
import { HttpAgent } from "@ag-ui/client";

const [base, format, sessionId, multitask] = process.argv.slice(2);
const errors = [];
let text = "";

if (format === "ai-sdk") {
  const transport = new DefaultChatTransport({
    api: `${base}/sse?format=ai-sdk`,
    body: { multitask },
  });
  const said = (id, words) => ({ id, role: "user", parts: [{ type: "text", text: words }] });
  try {
    const stream = await transport.sendMessages({
      chatId: sessionId,
      messages: [said("user-1", "go"), said("user-2", "second")],
      trigger: "submit-message",
      messageId: undefined,
      abortSignal: undefined,
    });
    let message;
    for await (const snapshot of readUIMessageStream({
      stream,
      onError: (error) => errors.push(String(error?.message ?? error)),
    })) {
      message = snapshot;
    }
    text = (message?.parts ?? [])
      .filter((part) => part.type === "text")
      .map((part) => part.text)
      .join("");
  } catch (error) {
    errors.push(String(error?.message ?? error));
  }
} else {
  const agent = new HttpAgent({
    url: `${base}/sse?format=ag-ui`,
    threadId: sessionId,
    initialMessages: [
      { id: "user-1", role: "user", content: "go" },
      { id: "user-2", role: "user", content: "second" },
    ],
  });
  const subscriber = {
    onTextMessageContentEvent({ event }) {
      if (!event.subagentRunId) text += event.delta;
    },
    onRunErrorEvent({ event }) {
      errors.push(`${event.code}: ${event.message}`);
    },
  };
  try {
    await agent.runAgent({ runId: "client-run-2", forwardedProps: { multitask } }, subscriber);
  } catch (error) {
    errors.push(String(error?.message ?? error));
  }
}
process.stdout.write(JSON.stringify({ text, errors }));
