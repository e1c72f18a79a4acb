// Magnetar console: a single-page application over the admin REST API.
// Every value shown comes from the API; every action is an API call.
// Names from the cluster are put in the page as text, never as markup.
"use strict";

const POLL_MS = 2000;   // stats polling of the topic view
const HISTORY = 90;     // points kept per chart (3 minutes)

let stopView = () => {}; // cleanup of the current view (its timers)

// ---- helpers ----

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v; // CSSOM: allowed by the page's CSP
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function seg(s) { return encodeURIComponent(s); }

function token() { return sessionStorage.getItem("magnetar-token") || ""; }

function status(msg, kind) {
  const s = document.getElementById("status");
  s.className = msg ? kind : "";
  s.textContent = msg || "";
}

// api calls the admin API; it throws an Error with the API's reason.
async function api(method, path, body) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = text; }
  }
  if (!resp.ok) {
    const reason = data && data.reason ? data.reason : resp.status + " " + resp.statusText;
    const err = new Error(reason);
    err.status = resp.status;
    throw err;
  }
  return data;
}

// section runs fill, showing its error in place instead of failing the view.
async function section(container, fill) {
  try {
    await fill();
  } catch (e) {
    container.append(el("p", { class: "error-text muted" }, "Could not load: " + e.message));
  }
}

function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function fmtRate(r) { return (r >= 100 ? r.toFixed(0) : r.toFixed(1)) + "/s"; }

function table(id, headers, rows) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, headers.map(h => el("th", { class: h.num ? "num" : "" }, h.label || h)))),
    el("tbody", {}, rows));
}

function crumbs(...parts) {
  return el("div", { class: "crumbs" }, parts.map((p, i) => [i ? " / " : "", p.href ? el("a", { href: p.href }, p.label) : p.label]));
}

// ---- views ----

async function clusterView(view) {
  view.append(el("h1", {}, "Cluster"));
  const cards = el("div", { class: "cards" });
  view.append(cards);
  await section(view, async () => {
    const clusters = await api("GET", "/admin/v2/clusters");
    cards.append(el("div", { class: "card", id: "clusters" }, el("div", { class: "k" }, "Cluster"), el("div", { class: "v" }, clusters.join(", "))));
  });
  view.append(el("h2", {}, "Brokers"));
  await section(view, async () => {
    const load = await api("GET", "/admin/v2/brokers/load");
    const brokers = Object.values(load).sort((a, b) => a.address.localeCompare(b.address));
    cards.append(el("div", { class: "card" }, el("div", { class: "k" }, "Brokers"), el("div", { class: "v", id: "broker-count" }, brokers.length)));
    view.append(table("brokers",
      ["Address", "Admin", { label: "Topics", num: 1 }, { label: "Msg in", num: 1 }, { label: "Msg out", num: 1 }, { label: "In", num: 1 }, { label: "CPU (cores)", num: 1 }],
      brokers.map(b => el("tr", {},
        el("td", {}, b.address), el("td", {}, b.http || "-"), el("td", { class: "num" }, b.topics),
        el("td", { class: "num" }, fmtRate(b.msgRateIn)), el("td", { class: "num" }, fmtRate(b.msgRateOut)),
        el("td", { class: "num" }, fmtBytes(b.bytesRateIn) + "/s"), el("td", { class: "num" }, b.cpu.toFixed(2))))));
  });
  view.append(el("h2", {}, "Bookies"));
  await section(view, async () => {
    const bookies = await api("GET", "/admin/v2/bookies/all");
    cards.append(el("div", { class: "card" }, el("div", { class: "k" }, "Bookies"), el("div", { class: "v", id: "bookie-count" }, bookies.length)));
    view.append(table("bookies",
      ["Bookie", "Address", "State", "Disk used", { label: "Free", num: 1 }, { label: "Ledgers", num: 1 }, { label: "Under-replicated", num: 1 }],
      bookies.map(b => {
        const total = b.diskUsedBytes + b.diskFreeBytes;
        const pct = total ? (100 * b.diskUsedBytes / total) : 0;
        return el("tr", {},
          el("td", {}, b.id), el("td", {}, b.address || "-"),
          el("td", { class: "state-" + b.state }, b.state),
          el("td", {}, el("span", { class: "bar" }, el("span", { style: "width:" + pct.toFixed(0) + "%" })), pct.toFixed(0) + "%"),
          el("td", { class: "num" }, fmtBytes(b.diskFreeBytes)), el("td", { class: "num" }, b.ledgers),
          el("td", { class: "num" }, b.underReplicated));
      })));
  });
}

async function tenantsView(view) {
  view.append(el("h1", {}, "Tenants"));
  await section(view, async () => {
    const tenants = await api("GET", "/admin/v2/tenants");
    view.append(table("tenants", ["Tenant"], tenants.map(t => el("tr", {}, el("td", {}, el("a", { href: "#/tenant/" + seg(t) }, t))))));
  });
}

async function tenantView(view, tenant) {
  view.append(crumbs({ label: "Tenants", href: "#/tenants" }, { label: tenant }));
  view.append(el("h1", {}, "Namespaces of " + tenant));
  await section(view, async () => {
    const nss = await api("GET", "/admin/v2/namespaces/" + seg(tenant));
    view.append(table("namespaces", ["Namespace"], nss.map(full => {
      const ns = full.slice(full.indexOf("/") + 1);
      return el("tr", {}, el("td", {}, el("a", { href: "#/ns/" + seg(tenant) + "/" + seg(ns) }, full)));
    })));
  });
}

async function namespaceView(view, tenant, ns) {
  view.append(crumbs({ label: "Tenants", href: "#/tenants" }, { label: tenant, href: "#/tenant/" + seg(tenant) }, { label: ns }));
  view.append(el("h1", {}, "Topics of " + tenant + "/" + ns));
  const name = el("input", { id: "new-topic", placeholder: "topic name", required: "" });
  const parts = el("input", { id: "new-partitions", type: "number", min: "0", value: "0", style: "width:6em", title: "partitions (0: not partitioned)" });
  view.append(el("form", {
    class: "inline", id: "create-topic",
    onsubmit: async ev => {
      ev.preventDefault();
      const path = "/admin/v2/persistent/" + seg(tenant) + "/" + seg(ns) + "/" + seg(name.value);
      const n = parseInt(parts.value || "0", 10);
      try {
        if (n > 0) await api("PUT", path + "/partitions", n);
        else await api("PUT", path);
        status("Created topic " + name.value, "info");
        route();
      } catch (e) { status("Create topic: " + e.message, "error"); }
    },
  }, name, "partitions", parts, el("button", { type: "submit", class: "primary", "data-action": "create-topic" }, "Create topic")));
  await section(view, async () => {
    const topics = await api("GET", "/admin/v2/persistent/" + seg(tenant) + "/" + seg(ns));
    view.append(table("topics", ["Topic"], topics.map(full => {
      const local = full.slice(full.lastIndexOf("/") + 1);
      return el("tr", {}, el("td", {}, el("a", { href: "#/topic/" + seg(tenant) + "/" + seg(ns) + "/" + seg(local) }, full)));
    })));
  });
}

// Chart draws series (each {label, color, points}) on a canvas.
class Chart {
  constructor(id, title, series) {
    this.canvas = el("canvas", { id, width: "520", height: "160" });
    this.series = series;
    this.node = el("div", { class: "chart" }, el("div", { class: "k" }, title, " ", series.map(s => el("span", { style: "color:" + s.color }, "\u25A0 " + s.label + " "))), this.canvas);
  }
  push(values) {
    this.series.forEach((s, i) => { s.points.push(values[i]); if (s.points.length > HISTORY) s.points.shift(); });
    // What is drawn, readable by tests and tools: the points and the last values.
    this.canvas.dataset.points = String(this.series[0].points.length);
    this.canvas.dataset.last = values.map(v => v.toFixed(2)).join(",");
    this.draw();
  }
  draw() {
    const c = this.canvas.getContext("2d");
    const w = this.canvas.width, h = this.canvas.height, pad = 24;
    c.clearRect(0, 0, w, h);
    const max = Math.max(1, ...this.series.flatMap(s => s.points));
    c.strokeStyle = "#e4e7ec"; c.fillStyle = "#667085"; c.font = "11px sans-serif";
    for (let i = 0; i <= 2; i++) {
      const y = pad / 2 + (h - pad) * i / 2;
      c.beginPath(); c.moveTo(40, y); c.lineTo(w, y); c.stroke();
      const v = max * (2 - i) / 2;
      c.fillText(max >= 10 ? String(Math.round(v)) : v.toFixed(1), 2, y + 4);
    }
    for (const s of this.series) {
      c.strokeStyle = s.color; c.lineWidth = 2; c.beginPath();
      const skip = HISTORY - s.points.length; // newest at the right edge
      s.points.forEach((v, i) => {
        const x = 40 + (w - 44) * (i + skip) / (HISTORY - 1);
        const y = pad / 2 + (h - pad) * (1 - v / max);
        if (i) c.lineTo(x, y); else c.moveTo(x, y);
      });
      c.stroke();
    }
  }
}

async function topicView(view, tenant, ns, topic) {
  const base = "/admin/v2/persistent/" + seg(tenant) + "/" + seg(ns) + "/" + seg(topic);
  view.append(crumbs({ label: "Tenants", href: "#/tenants" }, { label: tenant, href: "#/tenant/" + seg(tenant) },
    { label: ns, href: "#/ns/" + seg(tenant) + "/" + seg(ns) }, { label: topic }));
  view.append(el("h1", {}, "persistent://" + tenant + "/" + ns + "/" + topic, " ",
    el("button", {
      "data-action": "unload", class: "danger", onclick: async () => {
        try { await api("PUT", base + "/unload"); status("Unloaded " + topic, "info"); }
        catch (e) { status("Unload: " + e.message, "error"); }
      },
    }, "Unload")));
  const cards = el("div", { class: "cards", id: "topic-stats" });
  const rate = new Chart("chart-rate", "Messages per second", [
    { label: "in", color: "#5b3cc4", points: [] }, { label: "out", color: "#12b76a", points: [] }]);
  const backlog = new Chart("chart-backlog", "Backlog (messages)", [{ label: "backlog", color: "#f79009", points: [] }]);
  const subs = el("div", { id: "subscriptions-section" });
  view.append(cards, el("h2", {}, "Rates and backlog"), el("div", { class: "charts" }, rate.node, backlog.node), el("h2", {}, "Subscriptions"), subs);

  let prev = null;
  const card = (k, v, id) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v", id }, v));
  const refresh = async () => {
    let st;
    try { st = await api("GET", base + "/stats"); } catch (e) { status("Stats: " + e.message, "error"); return; }
    if (st.partitions !== undefined) { // a partitioned topic: its partitions
      cards.replaceChildren(el("p", {}, "Partitioned topic:"), table("partitions", ["Partition"], Object.keys(st.partitions).sort().map(p => {
        const local = p.slice(p.lastIndexOf("/") + 1);
        return el("tr", {}, el("td", {}, el("a", { href: "#/topic/" + seg(tenant) + "/" + seg(ns) + "/" + seg(local) }, p)));
      })));
      return;
    }
    const now = Date.now();
    const total = Object.values(st.subscriptions).reduce((n, s) => n + s.msgBacklog, 0);
    if (prev) {
      const dt = (now - prev.at) / 1000;
      rate.push([Math.max(0, (st.msgInCounter - prev.in) / dt), Math.max(0, (st.msgOutCounter - prev.out) / dt)]);
      backlog.push([total]);
    }
    prev = { at: now, in: st.msgInCounter, out: st.msgOutCounter };
    cards.replaceChildren(card("Entries", st.entries, "stat-entries"), card("Storage", fmtBytes(st.storageSize), "stat-storage"),
      card("Producers", st.publishers.length, "stat-producers"), card("Messages in", st.msgInCounter, "stat-msg-in"),
      card("Backlog", total, "stat-backlog"));
    subs.replaceChildren(subscriptionsTable(base, st.subscriptions));
  };
  await refresh();
  const timer = setInterval(refresh, POLL_MS);
  stopView = () => clearInterval(timer);
}

function subscriptionsTable(base, subs) {
  const names = Object.keys(subs).sort();
  if (!names.length) return el("p", { class: "muted", id: "subscriptions" }, "No subscriptions.");
  return table("subscriptions", ["Subscription", "Type", { label: "Backlog", num: 1 }, "Mark-delete", "Consumers", "Actions"], names.map(name => {
    const s = subs[name];
    const path = base + "/subscription/" + seg(name);
    const n = el("input", { type: "number", min: "1", value: "1", style: "width:5em", "aria-label": "messages to skip" });
    const mins = el("input", { type: "number", min: "0", value: "10", style: "width:5em", "aria-label": "minutes back" });
    return el("tr", { "data-subscription": name },
      el("td", {}, name), el("td", {}, s.type || "-"), el("td", { class: "num backlog" }, s.msgBacklog),
      el("td", {}, s.markDeletePosition),
      el("td", { class: "consumers" }, s.consumers.length ? s.consumers.map(c => el("div", {}, c.consumerName, el("span", { class: "muted" }, " (" + c.msgOutCounter + " delivered)"))) : el("span", { class: "muted" }, "none")),
      el("td", {},
        el("form", {
          class: "inline", onsubmit: async ev => {
            ev.preventDefault();
            try { await api("POST", path + "/skip/" + parseInt(n.value, 10)); status("Skipped " + n.value + " on " + name, "info"); }
            catch (e) { status("Skip: " + e.message, "error"); }
          },
        }, el("button", { type: "submit", "data-action": "skip" }, "Skip"), n),
        el("form", {
          class: "inline", onsubmit: async ev => {
            ev.preventDefault();
            const ts = Date.now() - 60000 * parseFloat(mins.value || "0");
            try { await api("POST", path + "/resetcursor/" + Math.floor(ts)); status("Reset " + name + " to " + new Date(ts).toISOString(), "info"); }
            catch (e) { status("Reset cursor: " + e.message, "error"); }
          },
        }, el("button", { type: "submit", "data-action": "reset" }, "Reset to"), mins, "min ago")));
  }));
}

// ---- routing ----

async function route() {
  stopView();
  stopView = () => {};
  const view = document.getElementById("view");
  view.replaceChildren();
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  try {
    switch (parts[0]) {
      case undefined: await clusterView(view); break;
      case "tenants": await tenantsView(view); break;
      case "tenant": await tenantView(view, parts[1]); break;
      case "ns": await namespaceView(view, parts[1], parts[2]); break;
      case "topic": await topicView(view, parts[1], parts[2], parts[3]); break;
      default: view.append(el("p", {}, "No such page."));
    }
  } catch (e) {
    status(e.message, "error");
  }
  document.body.dataset.ready = location.hash || "#/";
}

document.getElementById("token-form").addEventListener("submit", ev => {
  ev.preventDefault();
  sessionStorage.setItem("magnetar-token", document.getElementById("token").value.trim());
  status("Token set for this tab.", "info");
  route();
});
window.addEventListener("hashchange", () => { status(""); route(); });
route();
