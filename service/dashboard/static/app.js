// Colloc dashboard: one page, hash routes, polling the admin API every REFRESH_MS.
"use strict";

const REFRESH_MS = 2000;
const PAGE = 50;
const PENDING_SHOWN = 10;  // the head of the queue on the cluster page
const LOG_TAIL = 64 * 1024;
// STATES (job, jobEnded, attemptEnded): the server's state lists, from /states.js
// [value, label] pairs (object keys that look like numbers would be reordered)
const WINDOWS = [["", "any time"], ["1", "last hour"], ["24", "last 24 h"], ["168", "last 7 days"]];
const anyOf = (values, label) => [["", label], ...values.map((v) => [v, v])];

// ---- helpers -------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// the admin token, kept in this browser's storage after logging in
const TOKEN_KEY = "colloc.token";

class Unauthenticated extends Error {}

/** POST an admin control; what went wrong, if anything, in an alert. */
function control(path, body) {
  const json = { body: JSON.stringify(body || {}), headers: { "Content-Type": "application/json" } };
  return api(path, {}, { method: "POST", ...json }).catch((e) => alert(e.message));
}

/** A button that asks, then POSTs to `path`. */
function actionButton(label, path) {
  return h("button", { type: "button", onclick: async () => { if (confirm(`${label}?`)) await control(path); } }, label);
}

/** Cordon, drain (asking for a deadline) or resume a node. */
function nodeControls(n) {
  if (n.admin_state !== "active") return actionButton("resume", `/v1/nodes/${n.name}/resume`);
  const drain = h("button", { type: "button", onclick: async () => {
    const deadline = prompt(`Drain ${n.name}: requeue the jobs still running after (10m, 1h; empty: let them finish)`);
    if (deadline !== null) await control(`/v1/nodes/${n.name}/drain`, deadline ? { deadline } : {});
  } }, "drain");
  return [actionButton("cordon", `/v1/nodes/${n.name}/cordon`), " ", drain];
}

async function api(path, params, options) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== null && v !== undefined) url.searchParams.set(k, v);
  const headers = { Authorization: `Bearer ${localStorage.getItem(TOKEN_KEY) || ""}` };
  const response = await fetch(url, { ...options, headers: { ...(options && options.headers), ...headers } });
  const body = await response.json().catch(() => null);
  const message = (body && body.error && body.error.message) || `${response.status} ${response.statusText}`;
  if (response.status === 401 || response.status === 403) throw new Unauthenticated(message);
  if (!response.ok) throw new Error(message);
  return body;
}

function badge(text) { return h("span", { class: `badge ${text}` }, text); }
function when(iso) { return iso ? new Date(iso).toLocaleString() : "–"; }
function ago(iso) {
  if (!iso) return "–";
  const s = Math.max(0, (Date.now() - new Date(iso)) / 1000);
  return s < 90 ? `${Math.round(s)} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago` : `${Math.round(s / 3600)} h ago`;
}
function sinceParam(hours) { return hours ? new Date(Date.now() - hours * 3600e3).toISOString() : ""; }
function table(head, rows, attrs) {
  return h("table", attrs, h("thead", {}, h("tr", {}, head.map((c) => h("th", { class: /MiB|GPUs|#|ratio|share|peaks|estimates|priority|attempts|exit/.test(c) ? "num" : null }, c)))), h("tbody", {}, rows));
}
function td(value, cls) { return h("td", { class: cls }, value); }
function num(value) { return td(value === null || value === undefined ? "–" : value, "num"); }

function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").filter(Boolean);
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  if (parts[0] === "jobs" && parts[1]) return { view: "job", id: Number(parts[1]), params };
  return { view: VIEWS[parts[0]] ? parts[0] : "cluster", params };
}
function setHashParams(view, params) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "")).toString();
  location.hash = `#/${view}${query ? "?" + query : ""}`;
}

async function gpuModels() {
  const cluster = await api("/v1/admin/cluster");
  return [...new Set(cluster.nodes.flatMap((n) => n.gpus.map((g) => g.model)))].sort();
}

function filterForm(fields, values, onChange) {
  const form = h("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); } });
  for (const f of fields) {
    let input;
    if (f.options) {
      input = h("select", { name: f.name }, f.options.map(([v, label]) => h("option", { value: v, selected: (values[f.name] || "") === v || null }, label)));
    } else {
      input = h("input", { name: f.name, value: values[f.name] || "", placeholder: f.placeholder || "", size: f.size || 12 });
    }
    input.addEventListener("change", () => onChange(Object.fromEntries(new FormData(form))));
    form.appendChild(h("label", {}, f.label, input));
  }
  return form;
}

// ---- cluster -------------------------------------------------------------

function memoryBar(gpu) {
  const total = gpu.memory_total_mib || 1;
  const pct = (mib) => `${Math.max(0, (100 * mib) / total)}%`;
  const bar = h("div", { class: "bar", "data-uuid": gpu.uuid });
  let left = 0;
  for (const a of gpu.allocations) {
    const title = `job ${a.job_id} “${a.job_name}” (${a.owner}), attempt ${a.attempt}: reserved ${fmtMib(a.reserved_mib)}, using ${fmtMib(a.used_mib)}`;
    bar.appendChild(h("div", { class: "seg job", "data-job-id": a.job_id, title, style: `left:${pct(left)};width:${pct(a.reserved_mib)};background:${colorFor(a.job_id)}` }, `#${a.job_id}`));
    left += a.reserved_mib;
  }
  if (gpu.memory_foreign_mib > 0) {
    bar.appendChild(h("div", { class: "seg foreign", title: `foreign processes: ${fmtMib(gpu.memory_foreign_mib)}`, style: `left:${pct(left)};width:${pct(gpu.memory_foreign_mib)}` }));
  }
  bar.appendChild(h("div", { class: "used", title: `observed in use: ${fmtMib(gpu.memory_used_mib)}`, style: `width:${pct(gpu.memory_used_mib)}` }));
  return bar;
}

function gpuRow(gpu) {
  const health = gpu.healthy ? badge("healthy") : h("span", { class: "badge unhealthy", title: gpu.health_reason || "" }, "unhealthy");
  const telemetry = [
    gpu.utilization_pct !== null ? `util ${Math.round(gpu.utilization_pct)}%` : "util unknown",
    gpu.temperature_c !== null ? `${Math.round(gpu.temperature_c)} °C` : null,
    gpu.power_w !== null ? `${Math.round(gpu.power_w)} W` : null,
  ].filter(Boolean).join(" · ");
  return h("div", { class: "gpu", "data-uuid": gpu.uuid },
    h("div", { class: "name" }, h("strong", {}, `GPU ${gpu.index}`), ` ${gpu.model} `, health, h("div", { class: "muted" }, telemetry)),
    memoryBar(gpu),
    h("div", { class: "muted" },
      `reserved ${fmtMib(gpu.memory_reserved_mib)} of ${fmtMib(gpu.memory_total_mib)}`, h("br"),
      `used ${fmtMib(gpu.memory_used_mib)} · foreign ${fmtMib(gpu.memory_foreign_mib)} · free ${fmtMib(gpu.memory_free_mib)}`));
}

function usageLines(series, field, dash, colors) {
  return series.map((s) => ({ label: s.key, color: colors[s.key], dash, points: s.points.map((p) => [new Date(p.at), p[field]]) }));
}

function chartBlock(title, lines, legend) {
  return h("div", { class: "chart" }, h("h2", {}, title), lineChart(lines),
    h("div", { class: "legend" }, legend));
}

const cluster = {
  build(root) {
    const parts = {
      stats: h("div", { class: "cards", id: "stats" }),
      nodes: h("div", { class: "cards", id: "nodes" }),
      charts: h("div", { class: "grid2", id: "usage" }),
      pending: h("div", { id: "pending" }),
    };
    root.append(h("h2", {}, "Cluster"), parts.stats,
      h("div", { class: "legend" },
        h("span", {}, h("i", { style: "background:#2f5fd0" }), "reservation (one colour per job)"),
        h("span", {}, h("i", { class: "foreign" }), "foreign use"),
        h("span", {}, h("i", { style: "background:#1d2330;height:4px" }), "observed use")),
      parts.nodes, h("h2", {}, "Pending jobs (the first in the queue)"), parts.pending, parts.charts);
    return async () => {
      const [c, pending, running, byModel, byUser] = await Promise.all([
        api("/v1/admin/cluster"),
        api("/v1/admin/jobs", { state: "pending", limit: PENDING_SHOWN }),
        api("/v1/admin/jobs", { state: "running", limit: 1 }),
        api("/v1/admin/utilization", { group_by: "gpu_model" }),
        api("/v1/admin/utilization", { group_by: "owner" }),
      ]);
      const gpus = c.nodes.flatMap((n) => n.gpus);
      const sum = (f) => gpus.reduce((t, g) => t + g[f], 0);
      const stat = (n, l, id) => h("div", { class: "card stat", id }, h("div", { class: "n" }, n), h("div", { class: "l" }, l));
      parts.stats.replaceChildren(
        stat(c.nodes.length, `nodes (${c.nodes.filter((n) => n.state !== "ready").length} lost)`, "stat-nodes"),
        stat(gpus.length, `GPUs (${gpus.filter((g) => !g.healthy).length} unhealthy)`, "stat-gpus"),
        stat(fmtMib(sum("memory_reserved_mib")), `reserved of ${fmtMib(sum("memory_total_mib"))}`, "stat-reserved"),
        stat(fmtMib(sum("memory_used_mib")), "observed in use", "stat-used"),
        stat(running.total, "jobs running", "stat-running"),
        stat(pending.total, "jobs pending", "stat-pending"));
      parts.nodes.replaceChildren(...c.nodes.map((n) => h("div", { class: "card node", "data-node": n.name },
        h("h3", {}, n.name, " ", badge(n.state), " ", n.admin_state === "active" ? null : badge(n.admin_state), " ", nodeControls(n)),
        h("div", { class: "meta" }, `agent ${n.agent_version} · last heartbeat ${ago(n.last_heartbeat_at)}`),
        n.gpus.map(gpuRow))));
      parts.pending.replaceChildren(pending.jobs.length ? table(["id", "name", "user", "queue", "GPUs", "waiting", "reason"],
        pending.jobs.map((j) => h("tr", { class: "link", "data-job-id": j.id, onclick: () => { location.hash = `#/jobs/${j.id}`; } },
          td(j.id), td(j.name), td(j.owner), td(j.queue), num(j.gpus), td(ago(j.created_at)), td(j.reason || ""))),
        { id: "pending-table" }) : h("p", { class: "muted" }, "No job is waiting."),
        pending.total > pending.jobs.length ? h("p", {}, h("a", { href: "#/jobs?state=pending" }, `all ${pending.total} pending jobs`)) : null);
      const modelColors = distinctColors(byModel.series.map((s) => s.key));
      const userColors = distinctColors(byUser.series.map((s) => s.key));
      const legend = (series, colors) => series.map((s) => h("span", {}, h("i", { style: `background:${colors[s.key]}` }), s.key));
      parts.charts.replaceChildren(
        chartBlock("Memory per GPU model (solid: reserved, dashed: used, dotted: capacity)",
          [...usageLines(byModel.series, "reserved_mib", "", modelColors), ...usageLines(byModel.series, "used_mib", "5 3", modelColors), ...usageLines(byModel.series, "capacity_mib", "1 3", modelColors)],
          legend(byModel.series, modelColors)),
        chartBlock("Memory per user (solid: reserved, dashed: used)",
          [...usageLines(byUser.series, "reserved_mib", "", userColors), ...usageLines(byUser.series, "used_mib", "5 3", userColors)],
          legend(byUser.series, userColors)));
    };
  },
};

// ---- jobs ----------------------------------------------------------------

const jobs = {
  build(root, params) {
    const body = h("div", { id: "jobs" });
    const pager = h("div", { class: "pager" });
    const models = h("span");
    root.append(h("h2", {}, "Jobs"), models, body, pager);
    gpuModels().then((known) => {
      models.replaceWith(filterForm([
        { name: "state", label: "state", options: anyOf(STATES.job, "any") },
        { name: "owner", label: "user", placeholder: "any" },
        { name: "queue", label: "queue", placeholder: "any" },
        { name: "gpu_model", label: "GPU model (ran on)", options: anyOf(known, "any") },
        { name: "window", label: "submitted", options: WINDOWS },
      ], params, (values) => setHashParams("jobs", values)));
    });
    return async () => {
      const offset = Number(params.offset || 0);
      const query = { ...params, since: sinceParam(Number(params.window)), window: "", offset, limit: PAGE };
      const list = await api("/v1/admin/jobs", query);
      body.replaceChildren(table(
        ["id", "name", "user", "queue", "state", "GPUs", "reserved MiB", "peak MiB", "submitted", "reason"],
        list.jobs.map((j) => {
          const last = j.attempts[j.attempts.length - 1];
          return h("tr", { class: "link", "data-job-id": j.id, onclick: () => { location.hash = `#/jobs/${j.id}`; } },
            td(j.id), td(j.name), td(j.owner), td(j.queue), h("td", { class: "state" }, badge(j.state)), num(j.gpus),
            num(last ? last.reserved_mib : null), num(last ? last.peak_mib : null), td(ago(j.created_at)), td(j.reason || ""));
        }), { id: "job-table" }));
      const go = (to) => () => setHashParams("jobs", { ...params, offset: to });
      pager.replaceChildren(
        h("button", { type: "button", disabled: offset === 0 || null, onclick: go(Math.max(0, offset - PAGE)) }, "‹ newer"),
        h("span", { class: "muted" }, `${list.total ? offset + 1 : 0}–${offset + list.jobs.length} of ${list.total}`),
        h("button", { type: "button", disabled: offset + PAGE >= list.total || null, onclick: go(offset + PAGE) }, "older ›"));
    };
  },
};

// ---- one job -------------------------------------------------------------

const BREAKDOWN = ["weights", "gradients", "optimizer", "activations", "allocator", "context", "workspaces", "communication", "fixed_offset"];

async function logTail(jobId, attempt, stream) {
  const params = { attempt, stream };
  const head = await api(`/v1/jobs/${jobId}/logs`, { ...params, limit: 1 });
  const offset = Math.max(head.first_offset, head.end_offset - LOG_TAIL);
  return api(`/v1/jobs/${jobId}/logs`, { ...params, offset, limit: LOG_TAIL });
}

const job = {
  build(root, params, id) {
    const parts = Object.fromEntries(["head", "summary", "estimates", "attempts", "events", "logs", "spec"].map((k) => [k, h("div", { id: `job-${k}` })]));
    const logChoice = { stream: "stdout", attempt: "" };
    const streamSelect = h("select", { id: "log-stream", onchange: (e) => { logChoice.stream = e.target.value; } }, ["stdout", "stderr"].map((s) => h("option", { value: s }, s)));
    const attemptSelect = h("select", { id: "log-attempt", onchange: (e) => { logChoice.attempt = e.target.value; } });
    root.append(h("div", { id: "job-detail", "data-job-id": id }, parts.head, parts.summary,
      h("h2", {}, "Estimate per GPU model beside the observed peak"), parts.estimates,
      h("h2", {}, "Attempts"), parts.attempts,
      h("h2", {}, "Output ", attemptSelect, " ", streamSelect), parts.logs,
      h("h2", {}, "Events"), parts.events,
      h("h2", {}, "Spec"), parts.spec));
    return async () => {
      const [j, events, names] = await Promise.all([api(`/v1/jobs/${id}`), api("/v1/admin/events", { job_id: id, limit: 500 }), nodeNames()]);
      const cancel = STATES.jobEnded.includes(j.state) ? null :
        h("button", { type: "button", onclick: async () => { if (confirm(`Cancel job ${id}?`)) await api(`/v1/jobs/${id}/cancel`, {}, { method: "POST" }).catch((e) => alert(e.message)); } }, "cancel job");
      const control = j.state === "pending" ? (j.held ? "release" : "hold") : ["placed", "running"].includes(j.state) ? "requeue" : null;
      parts.head.replaceChildren(h("h2", {}, h("a", { href: "#/jobs" }, "Jobs"), ` › #${j.id} ${j.name} `, h("span", { id: "job-state" }, badge(j.state)),
        j.held ? [" ", badge("held")] : null, " ", cancel, " ", control && actionButton(control, `/v1/jobs/${id}/${control}`)));
      parts.summary.replaceChildren(table(["user", "queue", "priority", "GPUs", "GPU models", "memory claim MiB", "attempts", "submitted", "finished", "reason"], [h("tr", {},
        td(j.owner), td(j.queue), num(j.priority), num(j.gpus), td((j.gpu_models || ["any"]).join(", ")), num(j.memory_mib),
        num(`${j.attempts.length} of ${j.max_attempts}`), td(when(j.created_at)), td(when(j.finished_at)), td(j.reason || ""))]));
      const observed = {};
      for (const a of j.attempts) for (const g of a.gpus) if (a.peak_mib !== null) observed[g.model] = Math.max(observed[g.model] || 0, a.peak_mib);
      parts.estimates.replaceChildren(j.estimates.length ? table(
        ["GPU model", ...BREAKDOWN.map((b) => `${b} MiB`), "peak MiB", "bound MiB", "observed peak MiB", "method", "version"],
        j.estimates.map((e) => {
          const seen = observed[e.gpu_model];
          return h("tr", {}, td(e.gpu_model), BREAKDOWN.map((b) => num(e.breakdown_mib[b])), num(e.peak_mib), num(e.upper_mib),
            h("td", { class: seen > e.upper_mib ? "num error" : "num" }, seen === undefined ? "–" : seen), td(e.method), td(e.model_version));
        })) : h("p", { class: "muted" }, "No estimate: the job gave a memory claim and no training spec."));
      parts.attempts.replaceChildren(table(["#", "state", "node", "GPUs", "reserved MiB", "peak MiB", "placed", "started", "finished", "exit", "reason"],
        j.attempts.map((a) => h("tr", {}, num(a.number), td(badge(a.state)), td(a.node),
          td(a.gpus.map((g) => `${g.index}: ${g.model}`).join(", ")), num(a.reserved_mib), num(a.peak_mib),
          td(when(a.placed_at)), td(when(a.started_at)), td(when(a.finished_at)), num(a.exit_code), td(a.reason || "")))));
      const numbers = j.attempts.map((a) => String(a.number));
      if (attemptSelect.options.length !== numbers.length) {
        attemptSelect.replaceChildren(...numbers.map((n) => h("option", { value: n }, `attempt ${n}`)));
        attemptSelect.value = numbers[numbers.length - 1] || "";
        logChoice.attempt = attemptSelect.value;
      }
      if (logChoice.attempt) {
        const page = await logTail(id, logChoice.attempt, logChoice.stream).catch((e) => ({ text: e.message }));
        const ended = STATES.attemptEnded.includes(page.attempt_state);
        const none = ended ? `(attempt ${logChoice.attempt} wrote nothing to ${logChoice.stream})` : "(no output yet)";
        parts.logs.replaceChildren(h("pre", { id: "job-log" }, page.text || none));
      } else {
        parts.logs.replaceChildren(h("p", { class: "muted" }, "Not placed yet: no output."));
      }
      parts.events.replaceChildren(eventTable(events.events, names));
      parts.spec.replaceChildren(h("pre", { id: "job-spec" }, JSON.stringify(j.spec, null, 2)));
    };
  },
};

// ---- estimator -----------------------------------------------------------

const estimator = {
  build(root, params) {
    const body = h("div", { id: "estimator" });
    const form = h("span");
    root.append(h("h2", {}, "Estimator: estimate against observed peak"), form, body);
    gpuModels().then((known) => {
      form.replaceWith(filterForm([
        { name: "gpu_model", label: "GPU model", options: anyOf(known, "all") },
        { name: "owner", label: "user", placeholder: "any" },
        { name: "window", label: "observed", options: WINDOWS },
      ], params, (values) => setHashParams("estimator", values)));
    });
    return async () => {
      const e = await api("/v1/admin/estimator", { gpu_model: params.gpu_model, owner: params.owner, since: sinceParam(Number(params.window)), points: 1000 });
      const byModel = {};
      for (const p of e.points) (byModel[p.gpu_model] = byModel[p.gpu_model] || []).push(p);
      body.replaceChildren(
        h("p", {}, "Active calibration: ", h("strong", { id: "active-version" }, e.active), h("span", { class: "muted" }, ` · ${e.observed_peaks} observed peaks known to the estimator`)),
        table(["GPU model", "observed peaks", "under-estimates", "under-estimate share", "mean observed/estimated ratio"],
          e.accuracy.map((m) => h("tr", {}, td(m.gpu_model), num(m.observations), num(m.underestimates),
            num(`${(100 * m.underestimate_share).toFixed(1)}%`), num(m.mean_ratio.toFixed(3)))), { id: "accuracy" }),
        h("div", { class: "grid2" }, Object.entries(byModel).map(([model, points]) => h("div", { class: "chart" },
          h("h2", {}, model),
          scatterChart(points.map((p) => ({ x: p.peak_mib, y: p.observed_mib, bad: p.observed_mib > p.upper_mib,
            title: `job ${p.job_id} attempt ${p.attempt}: estimated ${p.peak_mib} MiB (bound ${p.upper_mib}), observed ${p.observed_mib} MiB` })),
          { xLabel: "estimated peak", yLabel: "observed peak (red: above the bound)" })))),
        h("h2", {}, "Fixed cost per process, learned per GPU model and driver"),
        h("p", { class: "muted" }, `Estimates now carry version ${e.model_version}. An offset is added to the default fixed cost (CUDA context, cuBLAS workspaces, NCCL) of every process in its environment once enough successful runs were seen.`),
        table(["environment", "runs", "offset (MiB)", "bound margin (MiB)", "in force", "updated"], e.fixed_cost_offsets.map((o) => h("tr", {}, td(o.environment), num(o.observations),
          num(o.offset_mib.toFixed(0)), num(o.margin_mib.toFixed(0)), td(o.in_force ? "yes" : "not yet"), td(when(o.updated_at)))), { id: "fixed-cost-offsets" }),
        h("h2", {}, "Calibration versions"),
        table(["version", "active", "trained on peaks", "created"], e.versions.map((v) => h("tr", {}, td(v.version), td(v.active ? "yes" : ""), num(v.observations), td(when(v.created_at))))));
    };
  },
};

// ---- events --------------------------------------------------------------

// node id -> name, from the cluster query (events carry ids)
async function nodeNames() {
  const cluster = await api("/v1/admin/cluster");
  return Object.fromEntries(cluster.nodes.map((n) => [n.id, n.name]));
}

function eventTable(events, names) {
  return table(["time", "kind", "job", "node", "message"], events.map((e) => h("tr", { "data-event-id": e.id },
    td(when(e.at)), td(e.kind), td(e.job_id ? h("a", { href: `#/jobs/${e.job_id}` }, `#${e.job_id}`) : ""),
    td(e.node_id === null ? "" : names[e.node_id] || `#${e.node_id}`, "node"), td(e.message))), { class: "feed" });
}

const events = {
  build(root, params) {
    const body = h("div", { id: "events" });
    root.append(h("h2", {}, "Events (newest first)"), filterForm([
      { name: "kind", label: "kind", placeholder: "e.g. job.oom" },
      { name: "job_id", label: "job", size: 6 },
      { name: "owner", label: "user", placeholder: "any" },
      { name: "window", label: "when", options: WINDOWS },
    ], params, (values) => setHashParams("events", values)), body);
    return async () => {
      const [found, names] = await Promise.all([
        api("/v1/admin/events", { kind: params.kind, job_id: params.job_id, owner: params.owner, since: sinceParam(Number(params.window)), order: "newest", limit: 200 }),
        nodeNames()]);
      body.replaceChildren(h("p", { class: "muted" }, `${found.total} matching events`), eventTable(found.events, names));
    };
  },
};

// ---- shell ---------------------------------------------------------------

const VIEWS = { cluster, jobs, estimator, events };
let update = null;
let generation = 0;
let busy = false;

async function refresh() {
  if (!update || busy) return;
  busy = true;
  try { await refreshNow(); } finally { busy = false; }
}

async function refreshNow() {
  const mine = generation;
  const status = document.getElementById("status");
  try {
    await update();
    if (mine !== generation) return;
    status.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    status.className = "status";
  } catch (error) {
    if (mine !== generation) return;
    if (error instanceof Unauthenticated) { showLogin(error.message); return; }
    status.textContent = `not updating: ${error.message}`;
    status.className = "status stale";
  }
}

function showLogin(reason) {
  generation += 1;
  update = null;
  const input = h("input", { type: "password", id: "token", size: 48, placeholder: "colloc_…", autocomplete: "off" });
  const form = h("form", { id: "login", class: "card", onsubmit: (e) => {
    e.preventDefault();
    localStorage.setItem(TOKEN_KEY, input.value.trim());
    navigate();
  } },
  h("h2", {}, "Log in"),
  h("p", { class: "muted" }, "The dashboard is for admins: paste an admin token (",
    h("code", {}, "colloc token create --role admin --name NAME"), ", or ", h("code", {}, "colloc-data/admin.token"), " under colloc up)."),
  localStorage.getItem(TOKEN_KEY) ? h("p", { class: "error" }, reason) : null,
  input, " ", h("button", { type: "submit" }, "log in"));
  document.getElementById("view").replaceChildren(form);
  document.getElementById("status").textContent = "logged out";
  input.focus();
}

function logout() {
  localStorage.removeItem(TOKEN_KEY);
  showLogin("");
}

function navigate() {
  if (!localStorage.getItem(TOKEN_KEY)) { showLogin(""); return; }  // nothing to ask the API yet
  generation += 1;
  const { view, id, params } = parseHash();
  const root = document.getElementById("view");
  root.replaceChildren();
  for (const a of document.querySelectorAll("nav a[data-view]")) a.classList.toggle("active", a.dataset.view === (view === "job" ? "jobs" : view));
  update = view === "job" ? job.build(root, params, id) : VIEWS[view].build(root, params);
  refreshNow();
}

window.addEventListener("hashchange", navigate);
document.getElementById("logout").addEventListener("click", (e) => { e.preventDefault(); logout(); });
navigate();
setInterval(refresh, REFRESH_MS);
