// The helix-agents inspector (specs/ui.md). No build step: a plain ES module.
//
// /ui                 the session list (GET sessions?topLevel=true, and q= from
//                     the search box; ?children=true: sub-agents' sessions too)
// /ui?session=ID      one session tree: GET snapshot, then GET sse from the
//                     snapshot's sequence, folding each chunk with the same
//                     rules as the server's fold (server/ui/view.py). What the
//                     user sent is not on the stream: snapshots bring it.
// A bearer token given as /ui#token=T is kept for the tab and sent on every
// data request.

const $ = (id) => document.getElementById(id);
const PAGE = 50;
const FINISH_TOOL = "__finish__"; // an agent's finishing call: the log keeps it, the views show its output

// --- requests ------------------------------------------------------------

function token() {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) sessionStorage.setItem("helix-token", decodeURIComponent(match[1]));
  return sessionStorage.getItem("helix-token");
}

function headers(extra = {}) {
  const bearer = token();
  return bearer ? { ...extra, Authorization: `Bearer ${bearer}` } : extra;
}

function url(path, params = {}) {
  const target = new URL(path, location.href);
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") target.searchParams.set(key, value);
  }
  return target;
}

class RequestError extends Error {
  constructor(status, body) {
    super(body && body.error ? `${body.code}: ${body.error}` : `HTTP ${status}`);
    this.status = status;
  }
}

async function getJson(path, params) {
  const response = await fetch(url(path, params), { headers: headers(), cache: "no-store" });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new RequestError(response.status, body);
  return body;
}

async function postJson(path, payload) {
  const response = await fetch(url(path), {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(payload),
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new RequestError(response.status, body);
  return body;
}

function problem(message) {
  const box = $("problem");
  box.hidden = !message;
  box.textContent = message || "";
  if (message && /UNAUTHORIZED/.test(message)) {
    box.textContent += " (open this page as ui#token=YOUR_TOKEN)";
  }
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function json(value) {
  return value === undefined ? "null" : JSON.stringify(value, null, 2);
}

function badge(status) {
  return el("span", { class: `badge ${status}`, "data-status": status, text: status });
}

function duration(seconds) {
  if (!(seconds >= 0)) return "";
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  return `${minutes}m ${String(Math.floor(seconds % 60)).padStart(2, "0")}s`;
}

// --- the session list ------------------------------------------------------

const list = { cursors: [null], index: 0 };

function loading(on) {
  // A visible state while a request is out: never a blank page.
  $("loading").hidden = !on;
  document.body.dataset.loading = String(on);
}

async function loadList() {
  const cursor = list.cursors[list.index];
  loading(true);
  try {
    const page = await getJson("sessions", {
      status: $("status-filter").value,
      agent: $("agent-filter").value.trim(),
      q: $("search-filter").value.trim(),
      topLevel: $("children-filter").checked ? null : "true", // absent: every session
      limit: PAGE,
      cursor,
    });
    problem(null);
    renderList(page);
  } catch (error) {
    problem(`could not list sessions: ${error.message}`);
  } finally {
    loading(false);
  }
}

function renderList(page) {
  const now = Date.now() / 1000;
  const rows = page.sessions.map((row) => {
    const link = el("a", { href: `ui?session=${encodeURIComponent(row.sessionId)}` + location.hash });
    link.textContent = row.sessionId;
    const end = row.status === "running" || row.status === "paused" ? now : row.updatedTs;
    const cell = el("td", {}, link);
    if (row.parentSessionId) {
      // A sub-agent's session (listed with "sub-agents too"): which one it serves.
      const parent = el("a", { href: `ui?session=${encodeURIComponent(row.parentSessionId)}` + location.hash });
      parent.textContent = row.parentSessionId;
      cell.append(el("div", { class: "parent", "data-parent-id": row.parentSessionId }, "sub-agent of ", parent));
    }
    return el(
      "tr",
      { "data-session-id": row.sessionId },
      cell,
      el("td", { text: row.agentType }),
      el("td", {}, badge(row.status)),
      el("td", { text: new Date(row.createdTs * 1000).toLocaleString() }),
      el("td", { text: duration(end - row.createdTs) }),
    );
  });
  document.querySelector("#sessions tbody").replaceChildren(...rows);
  $("sessions-empty").hidden = rows.length > 0;
  if (page.nextCursor) list.cursors[list.index + 1] = page.nextCursor;
  else list.cursors.length = list.index + 1;
  $("older").disabled = !page.nextCursor;
  $("newer").disabled = list.index === 0;
}

function showList() {
  $("list-page").hidden = false;
  const query = new URLSearchParams(location.search);
  $("status-filter").value = query.get("status") || "";
  $("agent-filter").value = query.get("agentType") || "";
  $("search-filter").value = query.get("q") || "";
  $("children-filter").checked = query.get("children") === "true";
  $("list-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    list.cursors = [null];
    list.index = 0;
    loadList();
  });
  $("status-filter").addEventListener("change", () => $("list-filter").requestSubmit());
  $("children-filter").addEventListener("change", () => $("list-filter").requestSubmit());
  $("older").addEventListener("click", () => {
    list.index += 1;
    loadList();
  });
  $("newer").addEventListener("click", () => {
    list.index = Math.max(0, list.index - 1);
    loadList();
  });
  loadList();
}

// --- the fold: the same rules as server/ui/view.py ---------------------------

function agentNode(view, agentId, agentType) {
  let node = view.agents[agentId];
  if (!node) {
    node = view.agents[agentId] = {
      agentId, agentType, parentId: null, toolCallId: null, status: "running", entries: [], usage: null, cost: null,
    };
  }
  return node;
}

function discardText(node, chars) {
  // Characters are code points, as in Python: Array.from splits by code point.
  while (chars > 0 && node.entries.length && node.entries.at(-1).kind === "text") {
    const last = node.entries.at(-1);
    const points = Array.from(last.text);
    if (points.length > chars) {
      last.text = points.slice(0, points.length - chars).join("");
      return;
    }
    chars -= points.length;
    node.entries.pop();
  }
}

function answered(view, toolCallId) {
  view.pending = view.pending.filter((entry) => entry.toolCallId !== toolCallId);
}

function apply(view, sequence, chunk) {
  view.at = Math.max(view.at, sequence);
  const node = agentNode(view, chunk.agentId, chunk.agentType);
  if (node.status === "paused" && chunk.type !== "input_required") node.status = "running";
  // An agent's __finish__ call stays in the log; its output entry shows it.
  if ((chunk.type === "tool_start" || chunk.type === "tool_end") && chunk.toolName === FINISH_TOOL) return;
  switch (chunk.type) {
    case "text_delta": {
      const last = node.entries.at(-1);
      if (last && last.kind === "text") last.text += chunk.delta;
      else node.entries.push({ kind: "text", text: chunk.delta });
      break;
    }
    case "reasoning_delta": {
      // What the model thought: shown apart from its answer.
      const last = node.entries.at(-1);
      if (last && last.kind === "reasoning") last.text += chunk.delta;
      else node.entries.push({ kind: "reasoning", text: chunk.delta });
      break;
    }
    case "partial_output": {
      // The output so far, replaced in place as it grows; the output chunk validates it.
      const last = node.entries.at(-1);
      if (last && last.kind === "output" && last.partial) last.output = chunk.output ?? null;
      else node.entries.push({ kind: "output", output: chunk.output ?? null, partial: true });
      break;
    }
    case "step_restarted":
      discardText(node, chunk.discardChars || 0);
      break;
    case "tool_start":
      node.entries.push({
        kind: "tool", toolCallId: chunk.toolCallId, toolName: chunk.toolName,
        arguments: chunk.arguments ?? null, result: null, error: null, done: false, seq: sequence,
      });
      answered(view, chunk.toolCallId);
      break;
    case "tool_end": {
      let entry = node.entries.findLast((e) => e.kind === "tool" && e.toolCallId === chunk.toolCallId);
      if (!entry) {
        entry = { kind: "tool", toolCallId: chunk.toolCallId, toolName: chunk.toolName, arguments: null, seq: 0 };
        node.entries.push(entry);
      }
      Object.assign(entry, { result: chunk.result ?? null, error: chunk.error ?? null, done: true });
      answered(view, chunk.toolCallId);
      break;
    }
    case "subagent_start": {
      const child = agentNode(view, chunk.subAgentId, chunk.subAgentType);
      Object.assign(child, { parentId: chunk.agentId, toolCallId: chunk.toolCallId, status: "running" });
      node.entries.push({ kind: "agent", agentId: chunk.subAgentId });
      break;
    }
    case "subagent_end":
      agentNode(view, chunk.subAgentId, chunk.subAgentType).status = chunk.success ? "completed" : "failed";
      break;
    case "output": {
      const last = node.entries.at(-1);
      if (last && last.kind === "output" && last.partial) Object.assign(last, { output: chunk.output ?? null, partial: false });
      else node.entries.push({ kind: "output", output: chunk.output ?? null, partial: false });
      break;
    }
    case "error":
      node.entries.push({ kind: "error", error: chunk.error });
      break;
    case "custom":
      node.entries.push({ kind: "custom", name: chunk.name, data: chunk.data ?? null });
      break;
    case "input_required":
      node.status = "paused";
      if (chunk.agentId === view.rootId) view.pending = chunk.pending || [];
      break;
    default:
      break; // a chunk type newer than this page: nothing to show
  }
}

// --- rendering ---------------------------------------------------------------

const USAGE_KEYS = [
  "inputTokens", "outputTokens", "cachedInputTokens", "reasoningTokens", "llmCalls", "toolCalls", "subAgentCalls",
];

function rollup(view, agentId, seen = new Set()) {
  const total = Object.fromEntries(USAGE_KEYS.map((key) => [key, 0]));
  if (seen.has(agentId)) return total;
  seen.add(agentId);
  const node = view.agents[agentId];
  for (const key of USAGE_KEYS) total[key] += (node.usage && node.usage[key]) || 0;
  for (const entry of node.entries) {
    if (entry.kind !== "agent" || !view.agents[entry.agentId]) continue;
    const child = rollup(view, entry.agentId, seen);
    for (const key of USAGE_KEYS) total[key] += child[key];
  }
  return total;
}

function costOf(view, agentId, seen = new Set()) {
  // The subtree's cost: null (shown "—") when a node's usage is not here or a call
  // in it has no price; never an estimate. unpriced: the models with no price.
  const total = { usd: 0, unpriced: [] };
  if (seen.has(agentId)) return total;
  seen.add(agentId);
  const node = view.agents[agentId];
  const own = node.cost;
  if (!own || own.usd === null || own.usd === undefined) total.usd = null;
  else total.usd += own.usd;
  for (const name of (own && own.unpriced) || []) if (!total.unpriced.includes(name)) total.unpriced.push(name);
  if (!own) total.unpriced.push(`${node.agentType}: usage not in this store`);
  for (const entry of node.entries) {
    if (entry.kind !== "agent" || !view.agents[entry.agentId]) continue;
    const child = costOf(view, entry.agentId, seen);
    total.usd = total.usd === null || child.usd === null ? null : total.usd + child.usd;
    for (const name of child.unpriced) if (!total.unpriced.includes(name)) total.unpriced.push(name);
  }
  return total;
}

function money(usd) {
  if (usd === null || usd === undefined) return "—";
  if (usd === 0) return "$0";
  if (usd < 0.000001) return "<$0.000001";
  return usd.toLocaleString("en-US", { style: "currency", currency: "USD", maximumSignificantDigits: 3 });
}

function costSpan(cls, label, cost) {
  const span = el("span", { class: cls, "data-usd": cost.usd === null ? "" : String(cost.usd), text: `${label} ${money(cost.usd)}` });
  span.title = cost.usd === null
    ? `no price known for ${cost.unpriced.join(", ") || "a call"} (serve --prices FILE.json)`
    : `USD ${cost.usd}`;
  return span;
}

function hasChildren(view, agentId) {
  return view.agents[agentId].entries.some((entry) => entry.kind === "agent" && view.agents[entry.agentId]);
}

function renderTotal(view) {
  const usage = rollup(view, view.rootId);
  const cost = costOf(view, view.rootId);
  const tokens = usage.inputTokens + usage.outputTokens;
  const box = $("tree-total");
  box.replaceChildren(
    el("span", { class: "total-tokens", text: `tree total: ${tokens.toLocaleString("en-US")} tokens ` +
      `(${usage.inputTokens.toLocaleString("en-US")} in / ${usage.outputTokens.toLocaleString("en-US")} out), ` +
      `${usage.llmCalls} LLM calls` }),
    costSpan("total-cost", "cost:", cost),
  );
}

function usageText(usage) {
  // Cached input is part of the input, reasoning part of the output: said when there is any.
  const cached = usage.cachedInputTokens ? ` (${usage.cachedInputTokens} cached)` : "";
  const thought = usage.reasoningTokens ? ` (${usage.reasoningTokens} reasoning)` : "";
  return `${usage.inputTokens} in${cached} / ${usage.outputTokens} out${thought} tokens, ` +
    `${usage.llmCalls} LLM, ${usage.toolCalls} tool, ${usage.subAgentCalls} sub-agent calls`;
}

const DECIDER_KEY = "helix-decider";
const DECIDER_MAX = 200; // the protocol's limit on decidedBy (DECIDED_BY_MAX)

function decider() {
  try {
    return localStorage.getItem(DECIDER_KEY) || "";
  } catch (error) {
    return ""; // storage turned off: ask each time
  }
}

function remember(name) {
  try {
    if (name.trim()) localStorage.setItem(DECIDER_KEY, name.trim());
    else localStorage.removeItem(DECIDER_KEY);
  } catch (error) {
    // storage turned off: nothing to remember
  }
}

const openTools = new Set();
const INLINE = 160; // characters of JSON shown on one line; longer values fold below it

function compact(value) {
  return value === undefined || value === null ? "" : JSON.stringify(value);
}

// --- fork here (specs/branches.md, specs/ui.md) ------------------------------------

function forkButton(open) {
  // Shown on hover (and focus): a timeline entry's way to a branch from it.
  return el("button", { type: "button", class: "fork-here", title: "fork the tree here, with an edit", text: "fork here", onclick: open });
}

function openFork(what, atSeq, text, edit) {
  // The edit box: the sequence to fork at, and the text to put in the past instead.
  $("fork-what").textContent = what;
  $("fork-seq").value = String(atSeq);
  $("fork-edit").value = text;
  $("fork-edit").dataset.original = text;
  fork.edit = edit;
  $("fork-panel").hidden = false;
  $("fork-edit").focus();
}

const fork = { edit: null };

async function submitFork(event) {
  event.preventDefault();
  const text = $("fork-edit").value;
  const edits = [];
  try {
    if (fork.edit && text !== $("fork-edit").dataset.original) edits.push(fork.edit(text));
  } catch (error) {
    problem(`fork: ${error.message}`);
    return;
  }
  try {
    const made = await postJson("fork", { sessionId: session.rootId, atSeq: Number($("fork-seq").value), edits });
    location.search = `?session=${encodeURIComponent(made.rootSessionId)}`;
  } catch (error) {
    problem(`fork: ${error.message}`);
  }
}

function forkUser(entry) {
  // Edit and regenerate: the message replaced, the turn run again from it.
  return forkButton(() => openFork(`fork at sequence ${entry.seq}: the user's message`, entry.seq, entry.text,
    (text) => ({ kind: "user_message", seq: entry.seq, message: { role: "user", content: text } })));
}

function forkTool(entry, agentId) {
  // Between the call and its result: its result given (edited), or the call run again live.
  const text = entry.done ? (entry.error === null ? json(entry.result) : "") : "";
  return forkButton(() => openFork(`fork at sequence ${entry.seq}: ${entry.toolName}'s result (unchanged: run it again)`,
    entry.seq, text, (edited) => ({
      kind: "tool_result", toolCallId: entry.toolCallId, result: JSON.parse(edited),
      sessionId: agentId === session.rootId ? undefined : agentId,
    })));
}

function renderTool(entry, agentId) {
  // Readable without clicking: the call and its outcome on two lines, in full when
  // short; a long value is cut on its line and shown whole in the fold below.
  const state = !entry.done ? "running" : entry.error ? "failed" : "done";
  const args = compact(entry.arguments);
  const outcome = entry.error ?? compact(entry.result);
  const call = el(
    "div",
    { class: "tool-call" },
    el("span", { class: `tool-state ${state}`, title: state, text: state === "running" ? "…" : state === "failed" ? "✗" : "✓" }),
    el("code", { class: "tool-name", text: entry.toolName }),
    el("code", { class: "tool-args", text: `(${args.length > INLINE ? args.slice(0, INLINE) + "…" : args})` }),
  );
  const card = el("div", { class: `tool ${state}`, "data-tool-call-id": entry.toolCallId }, call);
  if (entry.seq && agentId) card.append(forkTool(entry, agentId));
  if (entry.done) {
    card.append(el("div", { class: `tool-outcome ${entry.error ? "tool-error" : "result"}` },
      el("span", { class: "arrow", text: entry.error ? "error " : "→ " }),
      el("code", { text: outcome.length > INLINE ? outcome.slice(0, INLINE) + "…" : outcome })));
  }
  if (args.length > INLINE || outcome.length > INLINE) {
    const whole = el(
      "details",
      { class: "tool-whole" },
      el("summary", { text: "whole arguments and result" }),
      el("pre", { class: "arguments", text: json(entry.arguments) }),
    );
    if (entry.done) whole.append(el("pre", { class: entry.error ? "tool-error" : "result", text: entry.error ?? json(entry.result) }));
    whole.open = openTools.has(entry.toolCallId);
    whole.addEventListener("toggle", () => {
      if (whole.open) openTools.add(entry.toolCallId);
      else openTools.delete(entry.toolCallId);
    });
    card.append(whole);
  }
  return card;
}

function renderDecision(decision) {
  // What was asked, the verdict, who, when and why.
  const when = new Date(decision.ts * 1000).toLocaleString();
  const who = decision.expired ? "by the timer (nobody answered)"
    : decision.decidedBy ? `by ${decision.decidedBy}` : "by (not recorded)";
  const verdict = decision.expired ? "expired" : decision.approved ? "approved" : "denied";
  const asked = decision.toolName ? `${decision.toolName}(${compact(decision.arguments)})` : decision.toolCallId;
  return el(
    "div",
    { class: `decision ${verdict}`, "data-tool-call-id": decision.toolCallId, "data-verdict": verdict },
    el("span", { class: `badge ${decision.approved ? "completed" : "failed"}`, text: verdict }),
    el("code", { class: "decision-call", text: asked }),
    el("span", { class: "decision-who", text: who }),
    el("span", { class: "decision-when", text: `at ${when}` }),
    decision.ownerSessionId
      ? el("span", { class: "decision-where", text: `in ${decision.ownerSessionId}` }) : null,
    el("span", { class: "decision-why", text: decision.reason ? `“${decision.reason}”` : "(no reason given)" }),
  );
}

function renderDecided(view) {
  const decisions = view.decisions || [];
  $("decided").hidden = !decisions.length;
  $("decided-list").replaceChildren(...decisions.map(renderDecision));
}

function who(principal) {
  // A session's owner or a request's maker (specs/auth.md): user@tenant.
  if (!principal) return "(nobody named)";
  return principal.tenant ? `${principal.user ?? ""}@${principal.tenant}` : principal.user ?? "?";
}

function renderRequests(view) {
  // Who owns the session, and who changed it (request_made): specs/auth.md.
  const requests = view.requests || [];
  $("requests").hidden = !view.owner && !requests.length;
  $("requests-list").replaceChildren(
    ...(view.owner ? [el("div", { class: "request owner", text: `owned by ${who(view.owner)}` })] : []),
    ...requests.map((request) => el("div", {
      class: "request",
      "data-action": request.action,
      text: `${request.action}${request.ref ? ` (${request.ref})` : ""} by ${who(request.by)}`
        + ` at ${new Date(request.ts * 1000).toLocaleString()}`,
    })),
  );
}

function renderAgent(view, agentId, drawn) {
  const node = view.agents[agentId];
  drawn.add(agentId);
  const head = el(
    "div",
    { class: "agent-head" },
    badge(node.status),
    el("b", { class: "agent-type", text: node.agentType }),
    el("code", { text: node.agentId }),
  );
  const usage = el("span", { class: "usage" });
  if (node.usage) {
    usage.textContent = `own: ${usageText(node.usage)}`;
    const total = rollup(view, agentId);
    if (total.llmCalls !== node.usage.llmCalls || total.toolCalls !== node.usage.toolCalls ||
        total.inputTokens !== node.usage.inputTokens || total.outputTokens !== node.usage.outputTokens) {
      usage.textContent += ` · with sub-agents: ${usageText(total)}`;
    }
  } else if (agentId !== view.rootId) {
    usage.textContent = "usage: not in this store";
  }
  head.append(usage);
  if (node.cost) {
    head.append(costSpan("cost", "cost:", { usd: node.cost.usd, unpriced: node.cost.unpriced || [] }));
    if (hasChildren(view, agentId)) head.append(costSpan("cost-with-children", "with sub-agents:", costOf(view, agentId)));
  }
  const body = el("div", { class: "agent-body" });
  for (const entry of node.entries) {
    if (entry.kind === "user") {
      body.append(el("div", { class: "user-message", "data-seq": String(entry.seq) },
        el("span", { class: "said-by", text: "user" }), el("div", { class: "said", text: entry.text }),
        agentId === view.rootId ? forkUser(entry) : null));
    } else if (entry.kind === "text") body.append(el("div", { class: "text", text: entry.text }));
    else if (entry.kind === "reasoning") {
      body.append(el("div", { class: "reasoning", title: "the model's reasoning (not its answer)" },
        el("span", { class: "thought-by", text: "reasoning" }), el("div", { class: "thought", text: entry.text })));
    }
    else if (entry.kind === "tool") body.append(renderTool(entry, agentId));
    else if (entry.kind === "agent" && view.agents[entry.agentId] && !drawn.has(entry.agentId)) {
      body.append(renderAgent(view, entry.agentId, drawn));
    } else if (entry.kind === "output" && entry.partial) {
      body.append(el("pre", { class: "output partial", title: "the output so far (not validated yet)", text: json(entry.output) }));
    } else if (entry.kind === "output") body.append(el("pre", { class: "output", text: json(entry.output) }));
    else if (entry.kind === "error") body.append(el("div", { class: "error", text: entry.error }));
    else if (entry.kind === "custom") body.append(el("pre", { class: "custom", text: `${entry.name}: ${json(entry.data)}` }));
  }
  return el("div", { class: "agent", "data-agent-id": agentId, "data-status": node.status }, head, body);
}

function renderTree(view) {
  const drawn = new Set();
  const parts = [renderAgent(view, view.rootId, drawn)];
  for (const agentId of Object.keys(view.agents)) {
    if (!drawn.has(agentId)) parts.push(renderAgent(view, agentId, drawn)); // a parent not seen yet
  }
  const tree = $("tree");
  tree.replaceChildren(...parts);
  tree.dataset.at = String(view.at);
}

function renderPending(view, live) {
  const box = $("pending");
  box.hidden = !view.pending.length;
  const forms = view.pending.map((entry) => pendingForm(entry, live));
  $("pending-list").replaceChildren(...forms);
}

function pendingForm(entry, live) {
  const note = el("div", { class: "form-problem error" });
  const form = el(
    "form",
    { class: "entry-form", "data-tool-call-id": entry.toolCallId, "data-kind": entry.kind },
    el("div", {}, el("b", { text: entry.kind === "approval" ? "approve " : "result for " }),
      el("code", { text: entry.toolName }), el("span", { text: ` (${entry.ownerSessionId})` })),
    el("pre", { class: "arguments", text: json(entry.arguments) }),
  );
  if (entry.expiresAt) {
    const when = new Date(entry.expiresAt * 1000).toLocaleTimeString();
    form.append(el("div", { class: "expires", text: `resolves by itself at ${when} if not answered` }));
  }
  const send = async (path, payload) => {
    try {
      await postJson(path, { sessionId: session.rootId, toolCallId: entry.toolCallId, ...payload });
      answered(session.live, entry.toolCallId);
      schedule();
    } catch (error) {
      note.textContent = error.message;
    }
  };
  if (!live) {
    form.append(el("div", { text: "(move the slider to live to answer)" }));
  } else if (entry.kind === "approval") {
    const reason = el("input", { name: "reason", placeholder: "reason (optional)", size: 30 });
    // Who decides: remembered in this browser, sent as decidedBy (specs/hitl.md).
    const who = el("input", {
      name: "decided-by", placeholder: "your name", size: 16, maxlength: String(DECIDER_MAX),
      "aria-label": "your name, recorded as who decided", autocomplete: "name",
    });
    who.value = decider();
    who.addEventListener("change", () => remember(who.value));
    const decide = (approved) => {
      const name = who.value.trim();
      remember(name);
      send("submit-approval", { approved, reason: reason.value || undefined, decidedBy: name || undefined });
    };
    form.append(
      who,
      reason,
      el("button", { type: "button", name: "approve", text: "approve", onclick: () => decide(true) }),
      el("button", { type: "button", name: "deny", text: "deny", onclick: () => decide(false) }),
    );
  } else {
    const result = el("textarea", { name: "result", placeholder: "result as JSON" });
    form.append(
      result,
      el("button", { type: "button", name: "send-result", text: "send result", onclick: () => {
        let value;
        try {
          value = JSON.parse(result.value || "null");
        } catch (error) {
          note.textContent = `not JSON: ${error.message}`;
          return;
        }
        send("submit-tool-result", { result: value });
      } }),
      el("button", { type: "button", name: "send-error", text: "send error",
        onclick: () => send("submit-tool-result", { error: result.value || "refused" }) }),
    );
  }
  form.append(note);
  return form;
}

// --- the session view: snapshot, then the live tail ---------------------------

const session = {
  rootId: null,
  live: null, // the fold of everything read so far
  tail: [], // [sequence, chunk] read since the last snapshot taken: a newer one is rebased on them
  shown: null, // a snapshot the slider asked for, or null when showing live
  lastSeq: 0,
  latest: 0,
  ended: false,
  reconnects: 0,
  frame: 0,
  refresh: 0, // the pending usage refresh's timer
  refreshAgain: false, // chunks came while it was pending: take another after it
  asked: 0, // how many times the slider asked for a sequence
};

function schedule() {
  if (!session.frame) session.frame = requestAnimationFrame(render);
}

function render() {
  session.frame = 0;
  const view = session.shown || session.live;
  renderTree(view);
  renderPending(view, !session.shown);
  renderDecided(view);
  renderRequests(view);
  renderTotal(view);
  const status = view.agents[view.rootId].status;
  $("root-status").className = `badge ${status}`;
  $("root-status").textContent = status;
  $("root-status").dataset.status = status;
  const top = Math.max(session.lastSeq, session.latest, 1);
  const slider = $("slider");
  slider.max = String(top);
  $("seq").max = String(top);
  if (!session.shown) {
    slider.value = String(top);
    $("seq").value = String(session.live.at || top);
  }
  $("seq-of").textContent = `of ${top}`;
  $("mode").textContent = session.shown ? `showing the tree at sequence ${session.shown.at}` : "";
  document.body.dataset.lastSeq = String(session.lastSeq);
  document.body.dataset.reconnects = String(session.reconnects);
  document.body.dataset.ended = String(session.ended);
}

function connection(text) {
  $("connection").textContent = text;
}

async function snapshot(at) {
  const taken = await getJson("snapshot", { sessionId: session.rootId, at });
  session.latest = Math.max(session.latest, taken.latestSequence);
  return taken;
}

function refreshSoon() {
  // Usage is not on the stream: take it (and, once ended, the final status) from a
  // snapshot, at most one in flight and one every half second however fast chunks come.
  if (session.refresh) {
    session.refreshAgain = true;
    return;
  }
  session.refresh = setTimeout(async () => {
    try {
      const fresh = await snapshot(null);
      if (said(fresh.view) > said(session.live)) rebase(fresh);
      session.tail = session.tail.filter(([sequence]) => sequence > fresh.at);
      for (const [agentId, node] of Object.entries(fresh.view.agents)) {
        if (session.live.agents[agentId]) {
          session.live.agents[agentId].usage = node.usage;
          session.live.agents[agentId].cost = node.cost;
        }
      }
      session.live.decisions = fresh.view.decisions; // decisions are not on the stream
      session.live.owner = fresh.view.owner; // nor who owns and changed the session
      session.live.requests = fresh.view.requests;
      if (session.ended) session.live.agents[session.rootId].status = fresh.status.status;
      schedule();
    } catch (error) {
      // the next chunk tries again
    }
    session.refresh = 0;
    if (session.refreshAgain) {
      session.refreshAgain = false;
      refreshSoon();
    }
  }, 500);
}

function said(view) {
  // How many messages of the user the view holds (they are the root's).
  return view.agents[view.rootId].entries.filter((entry) => entry.kind === "user").length;
}

function rebase(fresh) {
  // A snapshot holds a message of the user this page's fold has not seen (they are not
  // on the stream): it becomes the fold, with the chunks read after it folded on top.
  const view = fresh.view;
  view.agents[session.rootId].status = session.live.agents[session.rootId].status;
  for (const [sequence, chunk] of session.tail) if (sequence > view.at) apply(view, sequence, chunk);
  session.live = view;
}

function onFrame(frame) {
  if (frame.event === "chunk") {
    const sequence = Number(frame.id);
    if (!(sequence > session.lastSeq)) return; // seen already
    const { chunk } = JSON.parse(frame.data);
    // A snapshot newer than the stream may have folded it already (rebase).
    if (sequence > session.live.at) apply(session.live, sequence, chunk);
    session.tail.push([sequence, chunk]);
    session.lastSeq = sequence;
    refreshSoon();
  } else if (frame.event === "end") {
    session.ended = true;
    session.live.agents[session.rootId].status = "completed";
    refreshSoon();
  } else if (frame.event === "error") {
    const body = JSON.parse(frame.data);
    session.ended = true;
    session.live.agents[session.rootId].status = body.recoverable ? "interrupted" : "failed";
    refreshSoon();
  }
  schedule();
}

function* frames(buffer) {
  // Yields [frame, rest] for each complete frame at the start of buffer.
  for (;;) {
    const match = buffer.match(/\r\n\r\n|\n\n|\r\r/);
    if (!match) return buffer;
    const block = buffer.slice(0, match.index);
    buffer = buffer.slice(match.index + match[0].length);
    const frame = { event: "message", data: [], id: null };
    for (const line of block.split(/\r\n|\n|\r/)) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") frame.data.push(value);
      else if (field === "event") frame.event = value;
      else if (field === "id") frame.id = value;
    }
    if (frame.data.length) yield { ...frame, data: frame.data.join("\n") };
  }
}

async function follow() {
  let backoff = 250;
  while (!session.ended) {
    let reason = "the stream closed";
    try {
      connection(session.reconnects ? "reconnecting…" : "connecting…");
      const response = await fetch(url("sse", { sessionId: session.rootId }), {
        headers: headers({ "Last-Event-ID": String(session.lastSeq) }),
        cache: "no-store",
      });
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        const error = new RequestError(response.status, body);
        if (response.status < 500) {
          problem(`stream: ${error.message}`);
          connection("stopped");
          return;
        }
        throw error;
      }
      connection("live");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        const parsed = frames(buffer);
        let step = parsed.next();
        while (!step.done) {
          onFrame(step.value);
          backoff = 250;
          step = parsed.next();
        }
        buffer = step.value;
      }
    } catch (error) {
      reason = error.message;
    }
    if (session.ended) break;
    session.reconnects += 1;
    connection(`disconnected (${reason}); reconnecting from ${session.lastSeq}`);
    schedule();
    await new Promise((resolve) => setTimeout(resolve, backoff));
    backoff = Math.min(backoff * 2, 5000);
  }
  connection(session.ended ? "ended" : "stopped");
  schedule();
}

async function showAt(value) {
  // Only the last request counts: a slower answer to an earlier one is dropped.
  const asked = ++session.asked;
  const at = Number(value);
  if (!(at >= 1) || at >= Math.max(session.lastSeq, session.latest)) {
    session.shown = null;
  } else {
    try {
      const taken = await snapshot(at);
      if (asked !== session.asked) return;
      taken.view.agents[taken.view.rootId].status = taken.status.status;
      session.shown = taken.view;
      $("seq").value = String(taken.at);
    } catch (error) {
      problem(`snapshot: ${error.message}`);
    }
  }
  schedule();
}

async function showSession(rootId) {
  session.rootId = rootId;
  $("back").hidden = false;
  $("session-title").textContent = rootId;
  document.title = `${rootId} · helix-agents`;
  let first;
  loading(true);
  try {
    first = await snapshot(null);
  } catch (error) {
    problem(`could not load ${rootId}: ${error.message}`);
    return;
  } finally {
    loading(false);
  }
  $("session-page").hidden = false;
  first.view.agents[rootId].status = first.status.status;
  session.live = first.view;
  session.lastSeq = first.at; // chunks after the snapshot come from the stream
  $("slider").addEventListener("input", (event) => showAt(event.target.value));
  $("seq").addEventListener("change", (event) => showAt(event.target.value));
  $("go-live").addEventListener("click", () => showAt(0));
  $("fork-panel").addEventListener("submit", submitFork);
  $("fork-cancel").addEventListener("click", () => { $("fork-panel").hidden = true; });
  schedule();
  follow();
}

const params = new URLSearchParams(location.search);
token();
$("server").textContent = location.host;
$("back").href = "ui" + location.hash;
if (params.get("session")) showSession(params.get("session"));
else showList();
