// The inspector's comparison of two branches (specs/ui.md, "Comparing branches"):
// GET diff?a=A&b=B, shown side by side from their common prefix.

function token() {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) sessionStorage.setItem("helix-token", decodeURIComponent(match[1]));
  return sessionStorage.getItem("helix-token");
}

function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function json(value) {
  return value === null || value === undefined ? "-" : JSON.stringify(value);
}

function cost(usd) {
  return usd === null || usd === undefined ? "unknown (no price)" : `$${usd.toFixed(6)}`;
}

function sessionLink(id) {
  return el("a", { href: `../ui?session=${encodeURIComponent(id)}`, text: id });
}

function side(name, data) {
  const box = el("section", { class: "diff-side", "data-side": name });
  box.append(el("h2", {}, [`${name}: `, sessionLink(data.sessionId), " ",
    el("span", { class: `badge ${data.status}`, text: data.status })]));
  const parted = data.partedSeq === null
    ? "its log ends at the common prefix"
    : `parts at seq ${data.partedSeq} (${data.partedType})`;
  box.append(el("p", { class: "diff-parted", text: parted }));
  if (data.partedExcerpt) box.append(el("pre", { class: "diff-excerpt", text: data.partedExcerpt }));
  const rows = [
    ["output", json(data.output)],
    ["error", data.error || "-"],
    ["tokens in / out", `${data.usage.inputTokens} / ${data.usage.outputTokens}`],
    ["llm calls", String(data.usage.llmCalls)],
    ["cost", cost(data.costUsd)],
    ["events", String(data.events)],
  ];
  const table = el("table", { class: "diff-table" });
  for (const [label, value] of rows) {
    table.append(el("tr", {}, [el("th", { text: label }), el("td", {}, [el("code", { text: value })])]));
  }
  box.append(table);
  box.append(el("h3", { text: "after the prefix" }));
  const calls = new Map(data.toolCalls.map((call) => [call.toolCallId, call]));
  const shown = new Set();
  const list = el("ol", { class: "diff-steps" });
  const callItem = (call) => el("div", { class: `tool${call.isError ? " tool-error" : ""}` }, [
    el("span", { class: "tool-name", text: call.name }),
    el("code", { class: "tool-args", text: ` ${json(call.arguments)}` }),
    el("div", { class: "tool-outcome" }, [
      el("span", { class: "arrow", text: "\u2192 " }),
      el("code", { text: call.result === null ? "no result" : call.result }),
    ]),
  ]);
  for (const call of data.toolCalls) {
    if (!data.turns.some((turn) => turn.seq === call.seq)) {
      shown.add(call.toolCallId);
      list.append(el("li", { "data-seq": String(call.seq) }, [
        el("span", { class: "said-by", text: `seq ${call.seq}: result of an earlier call` }), callItem(call)]));
    }
  }
  for (const turn of data.turns) {
    const item = el("li", { "data-seq": String(turn.seq) }, [
      el("span", { class: "said-by", text: `seq ${turn.seq}: model` }),
      el("div", { class: "text", text: turn.text || "(no text)" }),
    ]);
    for (const call of calls.values()) {
      if (call.seq === turn.seq && !shown.has(call.toolCallId)) item.append(callItem(call));
    }
    list.append(item);
  }
  if (!list.children.length) list.append(el("li", { text: "no model turn or tool call" }));
  box.append(list);
  return box;
}

async function compare(a, b) {
  const problem = document.getElementById("problem");
  problem.hidden = true;
  const headers = token() ? { authorization: `Bearer ${token()}` } : {};
  const response = await fetch(`../diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`,
    { headers, cache: "no-store" });
  const body = await response.json();
  const summary = document.getElementById("diff-summary");
  const sides = document.getElementById("diff-sides");
  sides.replaceChildren();
  if (!response.ok) {
    summary.textContent = "";
    problem.textContent = body.error || `HTTP ${response.status}`;
    problem.hidden = false;
    return;
  }
  summary.textContent = body.same
    ? `the same: ${body.common} events, nothing parts them`
    : `common prefix: ${body.common} events (A to seq ${body.commonSeqA}, B to seq ${body.commonSeqB})`;
  sides.append(side("A", body.a), side("B", body.b));
}

const params = new URLSearchParams(location.search);
const form = document.getElementById("diff-form");
document.getElementById("diff-a").value = params.get("a") || "";
document.getElementById("diff-b").value = params.get("b") || "";
form.addEventListener("submit", (event) => {
  event.preventDefault();
  const a = form.a.value.trim();
  const b = form.b.value.trim();
  history.replaceState(null, "", `?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}${location.hash}`);
  compare(a, b);
});
token();
if (params.get("a") && params.get("b")) compare(params.get("a"), params.get("b"));
