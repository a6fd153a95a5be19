// Reads a helix-agents session's /sse?format=ag-ui stream with @ag-ui/client's HttpAgent
// (its SSE parser, event verifier and default reducer) and prints what the agent
// reconstructed, as JSON.
//
//   node read_ag_ui.mjs BASE_URL SESSION_ID [CUT]
//
// HttpAgent POSTs a RunAgentInput; helix-agents' stream is a GET of an existing
// session, so `requestInit` (HttpAgent's documented override point) makes it a GET
// carrying Last-Event-ID. With CUT, the first run's response stops after the CUT-th
// frame that carries an SSE id, and a second run of the same agent resumes from it.
// With HELIX_STOP_AT_INTERRUPT=1, a run that ends with an `interrupt` outcome (the
// tree waits for people; its stream stays open) is closed by the client there.
import { HttpAgent } from "@ag-ui/client";

const [base, sessionId, cutArg] = process.argv.slice(2);
const stopAtInterrupt = process.env.HELIX_STOP_AT_INTERRUPT === "1";

class SessionStreamAgent extends HttpAgent {
  lastEventId = undefined;

  requestInit(_input) {
    const headers = { ...this.headers, Accept: "text/event-stream" };
    if (this.lastEventId !== undefined) headers["Last-Event-ID"] = this.lastEventId;
    return { method: "GET", headers, signal: this.abortController.signal };
  }
}

// A fetch whose response ends after the CUT-th frame with an id (a dropped connection).
function cuttingFetch(cut, seen) {
  return async (url, init) => {
    const response = await fetch(url, init);
    const frames = (await response.text()).split("\n\n");
    const kept = [];
    let count = 0;
    for (const frame of frames) {
      kept.push(frame);
      const id = frame.split("\n").find((line) => line.startsWith("id: "));
      if (id !== undefined) {
        count += 1;
        seen.lastId = id.slice(4);
        if (count === cut) break;
      }
    }
    return new Response(kept.join("\n\n") + "\n\n", {
      status: response.status,
      headers: response.headers,
    });
  };
}

const events = [];
const runs = [];
const states = []; // the agent's state after each change the reducer applied
const url = `${base}/sse?sessionId=${encodeURIComponent(sessionId)}&format=ag-ui`;

function subscriber(agent) {
  return {
    onEvent({ event }) {
      events.push(event);
    },
    onStateChanged({ state }) {
      states.push(structuredClone(state));
    },
    onRunFinishedEvent(params) {
      runs.push({ outcome: params.outcome, interrupts: params.interrupts, result: params.result });
      if (params.outcome === "interrupt" && stopAtInterrupt) agent.abortRun();
    },
    onRunErrorEvent({ event }) {
      runs.push({ error: event.message, code: event.code });
    },
  };
}

async function run(agent) {
  try {
    await agent.runAgent({}, subscriber(agent));
    return null;
  } catch (error) {
    return String(error?.message ?? error);
  }
}

const seen = { lastId: undefined };
const agent = new SessionStreamAgent({
  url,
  threadId: sessionId,
  ...(cutArg === undefined ? {} : { fetch: cuttingFetch(Number(cutArg), seen) }),
});
const failures = [await run(agent)];
if (cutArg !== undefined) {
  agent.fetch = (u, init) => fetch(u, init);
  agent.lastEventId = seen.lastId;
  failures.push(await run(agent));
}
process.stdout.write(
  JSON.stringify({
    messages: agent.messages,
    state: agent.state,
    states,
    events,
    runs,
    failures,
    lastEventId: seen.lastId,
  }),
);
