// Reads a helix-agents session's /sse?format=ai-sdk stream with the `ai` package's own
// client (DefaultChatTransport.reconnectToStream, readUIMessageStream) and prints the
// UI message the library reconstructed, as JSON.
//
//   node read_ai_sdk.mjs BASE_URL SESSION_ID [CUT]
//
// With CUT, the first read stops after the CUT-th frame that carries an SSE id; the
// library rebuilds the message from that much, then the stream is resumed with
// Last-Event-ID (the id of that frame) and the library continues the same message.
import {
  DefaultChatTransport,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";

const [base, sessionId, cutArg] = process.argv.slice(2);
const streamUrl = `${base}/sse?sessionId=${encodeURIComponent(sessionId)}&format=ai-sdk`;

function transport(lastEventId) {
  return new DefaultChatTransport({
    api: `${base}/chat`,
    prepareReconnectToStreamRequest: () => ({
      api: streamUrl,
      headers: lastEventId === undefined ? {} : { "Last-Event-ID": lastEventId },
    }),
  });
}

// Each different set of data-output parts the library held as the message grew (an
// output streamed as it is written shows as its successive values).
const outputsSeen = [];

function noteOutputs(snapshot) {
  const outputs = snapshot.parts.filter((part) => part.type === "data-output").map((part) => part.data);
  const text = JSON.stringify(outputs);
  if (outputs.length && JSON.stringify(outputsSeen.at(-1)) !== text) outputsSeen.push(JSON.parse(text));
}

async function read(stream, message) {
  const errors = [];
  let last = message;
  for await (const snapshot of readUIMessageStream({
    stream,
    message,
    onError: (error) => errors.push(String(error?.message ?? error)),
  })) {
    noteOutputs(snapshot);
    last = snapshot;
  }
  return { message: last, errors };
}

// The first CUT frames with an id of the stream, as the client would have received them.
async function cutStream(cut) {
  const response = await fetch(streamUrl);
  const headers = Object.fromEntries(response.headers.entries());
  const frames = (await response.text()).split("\n\n");
  const kept = [];
  let seen = 0;
  let lastId;
  for (const frame of frames) {
    kept.push(frame);
    const id = frame.split("\n").find((line) => line.startsWith("id: "));
    if (id !== undefined) {
      seen += 1;
      lastId = id.slice(4);
      if (seen === cut) break;
    }
  }
  const bytes = new TextEncoder().encode(kept.join("\n\n") + "\n\n");
  const body = new ReadableStream({
    start(controller) {
      controller.enqueue(bytes);
      controller.close();
    },
  });
  const parsed = parseJsonEventStream({ stream: body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(part, controller) {
        if (!part.success) throw part.error;
        controller.enqueue(part.value);
      },
    }),
  );
  return { parsed, lastId, headers };
}

let output;
if (cutArg === undefined) {
  const stream = await transport(undefined).reconnectToStream({ chatId: sessionId });
  const response = await fetch(streamUrl, { method: "HEAD" });
  const { message, errors } = await read(stream, undefined);
  output = { message, errors, outputsSeen, headers: Object.fromEntries(response.headers.entries()) };
} else {
  const { parsed, lastId, headers } = await cutStream(Number(cutArg));
  const first = await read(parsed, undefined);
  const firstMessage = structuredClone(first.message); // the second read goes on in place
  const stream = await transport(lastId).reconnectToStream({ chatId: sessionId });
  const second = await read(stream, first.message);
  output = {
    message: second.message,
    firstMessage,
    errors: [...first.errors, ...second.errors],
    lastEventId: lastId,
    outputsSeen,
    headers,
  };
}
process.stdout.write(JSON.stringify(output));
