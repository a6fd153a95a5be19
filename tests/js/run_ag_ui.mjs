// Runs a helix-agents agent the AG-UI way: @ag-ui/client's HttpAgent, unmodified, POSTs
// a RunAgentInput to /sse?format=ag-ui and reads the run's events; prints what the agent
// reconstructed, as JSON.
//
//   node run_ag_ui.mjs BASE_URL THREAD_ID AGENT_TYPE [ANSWER_JSON]
//
// With ANSWER_JSON, a run that ends with an `interrupt` outcome is followed by a second
// run whose `resume` answers every interrupt with that payload. $HELIX_MESSAGE is the
// user message's text ("go" when unset; "" is a reloaded page reattaching to the thread).
import { HttpAgent } from "@ag-ui/client";

const [base, threadId, agentType, answer] = process.argv.slice(2);

const agent = new HttpAgent({
  url: `${base}/sse?format=ag-ui&agentType=${encodeURIComponent(agentType)}`,
  threadId,
  initialMessages: [{ id: "user-1", role: "user", content: process.env.HELIX_MESSAGE ?? "go" }],
});
const events = [];
const runs = [];
const subscriber = {
  onEvent({ event }) {
    events.push(event);
  },
  onRunFinishedEvent(params) {
    runs.push({ outcome: params.outcome, interrupts: params.interrupts, result: params.result });
  },
  onRunErrorEvent({ event }) {
    runs.push({ error: event.message, code: event.code });
  },
};

async function run(parameters) {
  try {
    await agent.runAgent(parameters, subscriber);
    return null;
  } catch (error) {
    return String(error?.message ?? error);
  }
}

const failures = [await run({ runId: "client-run-1" })];
const last = runs.at(-1);
if (answer !== undefined && last?.outcome === "interrupt") {
  const payload = JSON.parse(answer);
  const resume = last.interrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload }));
  failures.push(await run({ runId: "client-run-2", resume }));
}
process.stdout.write(JSON.stringify({ messages: agent.messages, events, runs, failures }));
