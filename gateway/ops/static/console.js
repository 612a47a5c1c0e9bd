// The idem-gateway console. No framework and no build: the page's text is only ever set
// with textContent, so that a recorded body, a header or a key holding HTML stays text.
"use strict";

const REFRESH_MS = 2000;
// Every kind of traffic, in the order of the table's columns: "unprotected" is shown as
// "passed through"; "bypassed" went upstream without idempotency because Redis was down;
// "followed" got an answer in flight as it was made (on_in_flight: follow).
const OUTCOMES = [
  "forwarded", "replayed", "followed", "bypassed", "shadowed", "unprotected",
  "conflict", "mismatch", "rejected", "error",
];
const ATTENTION_PAGE = 50;
const SVG = "http://www.w3.org/2000/svg";
const TOKEN_KEY = "idem-admin-token"; // sessionStorage: this tab only, gone when it closes
// The states of a record whose request ran upstream (or may have: one that cannot be read).
const RAN = ["completed", "unknown", "corrupt"];
const RUNS_AGAIN = "Its request ran upstream: a retry after the purge runs it again.";
const SETTLED =
  "retries get 502 outcome-unknown (Idempotency-Outcome: unknown) until its retention ends or it is resolved; the upstream is not called again.";

const $ = (id) => document.getElementById(id);
let previous = null; // the last overview, for rates
let routes = []; // [{name, scope}] once the token is known
let shown = null; // the record on screen: {route, tenant, key}
let shownState = null; // its state as the lookup found it
let pending = null; // the action waiting for its confirmation
let attentionOffset = 0; // the attention page shown
let lastHistory = 0; // when the history was last read (ms)

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) tr.appendChild(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

async function api(path, body) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  const options = { headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    options.method = "POST";
    options.body = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, options);
  let data = null;
  try {
    data = await response.json();
  } catch (e) {
    data = null;
  }
  return { status: response.status, data };
}

// --- overview -------------------------------------------------------------------------

function rate(now, before, route, outcome) {
  if (!before || !before.routes[route]) return null;
  const seconds = now.time - before.time;
  if (seconds <= 0) return null;
  return Math.max(0, now.routes[route].counts[outcome] - before.routes[route].counts[outcome]) / seconds;
}

function countCell(now, route, outcome) {
  const total = now.routes[route].counts[outcome];
  const perSecond = rate(now, previous, route, outcome);
  const td = el("td", undefined, outcome === "bypassed" && total > 0 ? "alarm" : undefined);
  td.appendChild(el("span", perSecond === null ? "–" : perSecond.toFixed(1) + "/s", "rate"));
  td.appendChild(el("span", String(Math.round(total)), "total"));
  td.dataset.outcome = outcome;
  td.dataset.total = String(Math.round(total));
  return td;
}

function ms(value, beyond) {
  if (value === null || value === undefined) return "–";
  return (beyond ? "> " : "") + value.toFixed(2) + " ms";
}

function modeOf(entry) {
  if (!entry.mode) return "not configured";
  return entry.mode + (entry.fail_mode === "open" ? " · fails open" : "");
}

function showOverview(now) {
  $("version").textContent = "v" + now.version + " (" + now.build + ")";
  const workers = now.workers;
  $("workers-up").textContent = workers.up + " / " + workers.expected;
  $("workers-up").className = "value " + (workers.up === workers.expected ? "good" : "bad");
  $("redis").textContent = now.redis.reachable ? "reachable" : "unreachable";
  $("redis").className = "value " + (now.redis.reachable ? "good" : "bad");
  $("circuit").textContent = now.redis.circuit;
  $("circuit").className = "value " + (now.redis.circuit === "closed" ? "good" : "bad");
  $("eviction").textContent = now.redis.eviction_risk ? "yes" : "no";
  $("eviction").className = "value " + (now.redis.eviction_risk ? "bad" : "good");
  $("journal").textContent = String(now.journal_depth);
  $("journal").className = "value " + (now.journal_depth > 0 ? "bad" : "good");
  $("in-flight").textContent = String(now.in_flight);
  const bypassing = [];
  const rows = Object.keys(now.routes).map((route) => {
    const entry = now.routes[route];
    const tr = row([el("td", route, "route"), el("td", modeOf(entry)), ...OUTCOMES.map((o) => countCell(now, route, o))]);
    // Who follows an answer in flight now, under the followed count: no column of its own.
    const followers = Math.round(entry.followers || 0);
    const followed = tr.querySelector('td[data-outcome="followed"]');
    followed.dataset.followers = String(followers);
    if (followers > 0) followed.appendChild(el("span", followers + " following", "following"));
    tr.appendChild(el("td", ms(entry.upstream_p99_ms, entry.upstream_p99_beyond)));
    tr.appendChild(el("td", ms(entry.overhead_p50_ms)));
    tr.appendChild(el("td", ms(entry.overhead_p99_ms, entry.overhead_p99_beyond)));
    tr.dataset.route = route;
    if (entry.counts.bypassed > 0) {
      tr.className = "bypassing";
      const perSecond = rate(now, previous, route, "bypassed");
      bypassing.push(route + ": " + Math.round(entry.counts.bypassed) + " requests since start" +
        (perSecond ? ", " + perSecond.toFixed(1) + "/s now" : ""));
    }
    return tr;
  });
  if (!rows.length) rows.push(row([el("td", "no routes", "muted")]));
  replaceRows($("routes").tBodies[0], rows);
  $("bypass-list").replaceChildren(...bypassing.map((text) => el("li", text)));
  $("bypass-alert").hidden = bypassing.length === 0;
  replaceRows(
    $("workers").tBodies[0],
    workers.list.map((w) => {
      const tr = row([
        w.worker,
        w.pid === null ? "–" : w.pid,
        w.up ? "yes" : "no",
        w.ready ? "yes" : "no",
        w.redis ? "reachable" : "unreachable",
        w.draining ? "yes" : "no",
        String(Math.round(w.requests)),
      ]);
      tr.className = w.up && w.ready ? "" : "bad";
      return tr;
    }),
  );
  previous = now;
}

async function poll() {
  try {
    const { status, data } = await api("/console/api/overview");
    if (status !== 200 || !data) throw new Error("overview: " + status);
    showOverview(data);
    $("live").textContent = "live";
    $("live").className = "pill good";
  } catch (e) {
    $("live").textContent = "disconnected";
    $("live").className = "pill bad";
  }
  if (Date.now() - lastHistory >= 10000) await refreshHistory().catch(() => {});
  if (token()) await refreshAttention();
}

// --- history --------------------------------------------------------------------------

const CHARTS = [
  ["answers", "answers / s", (v) => v.toFixed(1)],
  ["errors", "errors / s", (v) => v.toFixed(1)],
  ["bypassed", "bypassed / s (no idempotency)", (v) => v.toFixed(1)],
  ["overhead_p99_ms", "overhead p99", (v) => v.toFixed(2) + " ms"],
];

function chart(points, field, label, format) {
  const box = el("div", undefined, "chart" + (field === "bypassed" || field === "errors" ? " alarm-chart" : ""));
  box.dataset.series = field;
  const values = points.map((p) => (p[field] === null || p[field] === undefined ? 0 : p[field]));
  const last = values.length ? values[values.length - 1] : null;
  const top = Math.max(...values, 0);
  box.append(el("span", label, "label"), el("span", last === null ? "–" : format(last) + " (max " + format(top) + ")", "now"));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 300 60");
  svg.setAttribute("preserveAspectRatio", "none");
  const line = document.createElementNS(SVG, "polyline");
  const drawn = values.length === 1 ? [values[0], values[0]] : values; // one point: a level line
  const step = drawn.length > 1 ? 300 / (drawn.length - 1) : 0;
  line.setAttribute(
    "points",
    drawn.map((v, i) => (i * step).toFixed(1) + "," + (58 - (top > 0 ? (v / top) * 54 : 0)).toFixed(1)).join(" "),
  );
  svg.appendChild(line);
  box.appendChild(svg);
  return box;
}

async function refreshHistory() {
  const { status, data } = await api("/console/api/history");
  if (status !== 200 || !data) return;
  lastHistory = Date.now();
  const points = data.points;
  $("history").replaceChildren(...CHARTS.map(([field, label, format]) => chart(points, field, label, format)));
  const minutes = points.length ? Math.round((points[points.length - 1].time - points[0].time) / 60) : 0;
  $("history-note").textContent =
    "(kept by the admin listener, a point every " + data.every + " s; " + points.length + " points, " + minutes + " min)";
}

// --- token ----------------------------------------------------------------------------

async function useToken() {
  const given = token();
  $("keys-open").hidden = true;
  $("keys-locked").hidden = false;
  if (!given) {
    $("token-state").textContent = "no token: overview only";
    return;
  }
  const { status, data } = await api("/console/api/routes");
  if (status !== 200 || !data) {
    $("token-state").textContent = status === 403 ? "admin.token is not set on the gateway" : "token refused";
    sessionStorage.removeItem(TOKEN_KEY);
    return;
  }
  $("token-state").textContent = "token accepted";
  routes = data.routes;
  const select = $("lookup-route");
  select.replaceChildren(...routes.map((r) => el("option", r.name)));
  showTenantInputs();
  $("keys-open").hidden = false;
  $("keys-locked").hidden = true;
  await refreshAttention();
}

function showTenantInputs() {
  const route = routes.find((r) => r.name === $("lookup-route").value);
  const box = $("lookup-tenants");
  box.replaceChildren();
  (route ? route.scope : []).forEach((header, i) => {
    const id = "lookup-tenant-" + i;
    const label = el("label", header);
    label.htmlFor = id;
    const input = el("input");
    input.id = id;
    input.spellcheck = false;
    input.placeholder = "as the client sends it";
    input.className = "tenant";
    box.append(label, input);
  });
}

// --- attention ------------------------------------------------------------------------

async function refreshAttention() {
  const { status, data } = await api("/console/api/attention?offset=" + attentionOffset + "&limit=" + ATTENTION_PAGE);
  if (status !== 200 || !data) return;
  const rows = data.items.map((item) => {
    const open = el("button", "Look up");
    open.type = "button";
    open.className = "attention-open";
    open.addEventListener("click", async () => {
      await lookup({ record: item.record });
      $("record").scrollIntoView({ block: "nearest" });
    });
    const tr = row([item.route, item.why, item.record, new Date(item.since * 1000).toISOString(), el("td")]);
    tr.lastChild.appendChild(open);
    tr.dataset.record = item.record;
    return tr;
  });
  replaceRows($("attention").tBodies[0], rows);
  let counted = rows.length ? data.offset + 1 + "–" + (data.offset + rows.length) + " of " + data.total : "";
  if (data.incomplete) counted += (counted ? " " : "") + "(incomplete)";
  $("attention-count").textContent = counted;
  $("attention-incomplete").hidden = !data.incomplete;
  $("attention-empty").hidden = rows.length > 0 || data.incomplete;
  $("attention-newer").disabled = data.offset === 0;
  $("attention-older").disabled = data.offset + rows.length >= data.total;
}

// --- lookup and actions ---------------------------------------------------------------

function lookupRequest() {
  const tenant = Array.from(document.querySelectorAll("#lookup-tenants input")).map((i) => i.value);
  while (tenant.length && tenant[tenant.length - 1] === "") tenant.pop(); // absent headers
  return { route: $("lookup-route").value, tenant, key: $("lookup-key").value };
}

function fact(list, name, value) {
  list.append(el("dt", name), el("dd", value === null || value === undefined ? "–" : value));
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toISOString() : null;
}

function showError(text) {
  $("lookup-error").textContent = text;
  $("lookup-error").hidden = false;
}

function named(request) {
  return request.key !== undefined ? "key \u201c" + request.key + "\u201d (route " + request.route + ")" : "record " + request.record;
}

async function lookup(request) {
  $("lookup-error").hidden = true;
  $("record").hidden = true;
  $("action-result").hidden = true;
  const { status, data } = await api("/console/api/key", request);
  if (status === 200 && data && data.state === "absent") return showError("No record for this key.");
  if (status !== 200 || !data) return showError((data && data.detail) || "lookup failed (" + status + ")");
  shown = request;
  shownState = data.state;
  const facts = $("record-facts");
  facts.replaceChildren();
  fact(facts, "key", request.key === undefined ? "not known here (looked up by its record id)" : request.key);
  fact(facts, "record", data.record);
  fact(facts, "route", data.route);
  fact(facts, "state", data.state);
  fact(facts, "status", data.status === undefined ? null : data.status + (data.reason ? " " + data.reason : ""));
  fact(facts, "created", when(data.created_at));
  fact(facts, "stored", when(data.stored_at));
  fact(facts, "expires", when(data.expires_at));
  fact(facts, "body size", data.body_bytes === undefined ? null : data.body_bytes + " bytes");
  if (data.state === "pending") fact(facts, "lease overdue", data.lease_overdue ? "yes" : "no");
  if (data.state === "owner-lost") fact(facts, "lease ended", data.lease_ended_seconds_ago + " s ago");
  replaceRows(
    $("record-headers").tBodies[0],
    (data.headers || []).map(([name, value]) => row([name, value])),
  );
  const body = data.body || { kind: "none" };
  $("record-body").textContent = body.kind === "text" ? body.text : body.kind === "hex" ? body.hex : "";
  $("record-body-note").textContent =
    body.kind === "hex" ? "(binary, as hex)" : body.kind === "missing" ? "(blob missing)" : body.truncated ? "(first bytes)" : "";
  $("resolve-open").hidden = !["unknown", "owner-lost"].includes(data.state);
  $("settle").hidden = data.state !== "corrupt"; // clients get 502 record-corrupt for it
  $("resolve").hidden = true;
  $("confirm").hidden = true;
  $("record").hidden = false;
}

function ask(text, action) {
  pending = action;
  $("confirm-text").textContent = text;
  $("confirm").hidden = false;
}

async function act(path, body, done, lookAgain) {
  const request = shown;
  const { status, data } = await api(path, { ...request, ...body });
  if (status === 200 && lookAgain) await lookup(request).catch(() => {});
  if (status === 200 && !lookAgain) $("record").hidden = true; // nothing left to show
  $("action-result").textContent = status === 200 ? done : (data && data.detail) || "refused (" + status + ")";
  $("action-result").className = status === 200 ? "notice good" : "notice error";
  $("action-result").hidden = false;
  await refreshAttention();
}

function start() {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    useToken();
  });
  $("token-forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    routes = [];
    shown = null;
    $("record").hidden = true;
    replaceRows($("attention").tBodies[0], []);
    useToken();
  });
  $("lookup-route").addEventListener("change", showTenantInputs);
  $("attention-newer").addEventListener("click", () => {
    attentionOffset = Math.max(0, attentionOffset - ATTENTION_PAGE);
    refreshAttention();
  });
  $("attention-older").addEventListener("click", () => {
    attentionOffset += ATTENTION_PAGE;
    refreshAttention();
  });
  $("lookup").addEventListener("submit", (event) => {
    event.preventDefault();
    lookup(lookupRequest());
  });
  $("purge").addEventListener("click", () => {
    const what = named(shown);
    const ran = RAN.includes(shownState); // the server refuses such a purge unconfirmed
    const cost = ran ? RUNS_AGAIN : "The next request with this key runs upstream.";
    ask("Purge the record of " + what + "? " + cost, () =>
      act("/keys/purge", ran ? { confirm: true } : {}, "Purged " + what + ": the next request with this key runs upstream.", false),
    );
  });
  $("settle").addEventListener("click", () => {
    const what = named(shown);
    ask("Settle the record of " + what + " as an unknown outcome? It is not run again: " + SETTLED, () =>
      act("/keys/settle", {}, "Settled " + what + " as an unknown outcome: " + SETTLED, true),
    );
  });
  $("resolve-open").addEventListener("click", () => {
    $("resolve").hidden = false;
  });
  $("resolve").addEventListener("submit", (event) => {
    event.preventDefault();
    const status = Number($("resolve-status").value);
    const body = { status, body: $("resolve-body").value, content_type: $("resolve-type").value || null };
    const what = named(shown);
    ask("Store a " + status + " answer for " + what + "? Every retry will replay it.", () =>
      act("/keys/resolve", body, "Resolved " + what + ": retries now replay this answer.", true),
    );
  });
  $("confirm-yes").addEventListener("click", () => {
    $("confirm").hidden = true;
    const action = pending;
    pending = null;
    if (action) action();
  });
  $("confirm-no").addEventListener("click", () => {
    $("confirm").hidden = true;
    pending = null;
  });
  useToken();
  poll();
  setInterval(poll, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", start);
