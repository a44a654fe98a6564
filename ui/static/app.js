// dmsc web UI: one page, five views (overview, devices, allocations,
// policies, statistics), each read from this node's HTTP API and
// refreshed when the event stream says something changed.
'use strict';

const TOKEN_KEY = 'dmsc.token';
const NS_KEY = 'dmsc.namespace';
const SERIES_KEY = 'dmsc.series';
const SERIES_MAX = 720; // samples kept for the charts (2 hours at 10 s)
const SAMPLE_EVERY = 10000;

const ui = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  namespace: sessionStorage.getItem(NS_KEY) || 'default',
  view: null, // the mounted view
  params: [], // the route's arguments
  filters: {}, // by view, kept across refreshes
  selected: null, // the device shown in the devices view's panel
  series: loadSeries(),
};

// ---- API ----

class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(json) {
  const h = {};
  if (ui.token) h['X-Dmsc-Token'] = ui.token;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body !== undefined) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  const text = await r.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = null; }
  }
  if (!r.ok) {
    const err = (data && data.error) || {};
    throw new APIError(r.status, err.code || String(r.status), err.message || r.statusText);
  }
  return data;
}

const get = (path) => api('GET', path);

// withNS adds the namespace to a read of allocations.
function withNS(path) {
  const sep = path.includes('?') ? '&' : '?';
  return path + sep + 'namespace=' + encodeURIComponent(ui.namespace || 'default');
}

// ---- helpers ----

function esc(v) {
  return String(v == null ? '' : v).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

function badge(s) { return `<span class="badge ${esc(s)}">${esc(String(s).replace('_', ' '))}</span>`; }

// allocBadge is an allocation's status, with "preempting" while its
// borrowed devices are reclaimed.
function allocBadge(a) { return a.preempting ? badge(a.status) + ' ' + badge('preempting') : badge(a.status); }

function when(t) {
  if (!t) return '–';
  const d = new Date(t);
  if (isNaN(d)) return '–';
  return d.toLocaleString();
}

function ago(t) {
  if (!t) return '–';
  const s = (Date.parse(t) - Date.now()) / 1000;
  const a = Math.abs(s);
  const txt = a < 60 ? `${Math.round(a)}s` : a < 3600 ? `${Math.round(a / 60)}m` : a < 86400 ? `${(a / 3600).toFixed(1)}h` : `${(a / 86400).toFixed(1)}d`;
  return s < 0 ? `${txt} ago` : `in ${txt}`;
}

function pct(f) { return `${Math.round((f || 0) * 100)}%`; }
function num(f) { return (Math.round((f || 0) * 100) / 100).toString(); }

function resources(r) {
  if (!r) return '–';
  const parts = [];
  if (r.memory_gb) parts.push(`mem ${num(r.memory_gb)} GB`);
  if (r.compute_units) parts.push(`cu ${num(r.compute_units)}`);
  if (r.storage_gb) parts.push(`disk ${num(r.storage_gb)} GB`);
  if (r.bandwidth_gbps) parts.push(`${num(r.bandwidth_gbps)} Gb/s`);
  return parts.join(', ') || '–';
}

function labels(m) {
  const keys = Object.keys(m || {}).sort();
  return keys.length ? keys.map((k) => `<code>${esc(k)}=${esc(m[k])}</code>`).join(' ') : '–';
}

function claims(req) {
  const list = ((req && req.claims) || []).map((c) => `${c.count}× ${esc(c.type)}${c.pool ? ' @' + esc(c.pool) : ''}${c.amount && Object.keys(c.amount).length ? ' (' + esc(resources(c.amount)) + ')' : ''}`).join(', ');
  return req && req.max_hosts > 1 ? `${list} over ≤${esc(req.max_hosts)} hosts${req.same ? ', one ' + esc(req.same) : ''}` : list;
}

// hosts is an allocation's host, or a gang's hosts.
function hosts(a) { return esc((a.hosts && a.hosts.length ? a.hosts.join(', ') : a.host) || '–'); }

function kv(pairs) {
  return `<dl class="kv">${pairs.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${v}</dd>`).join('')}</dl>`;
}

function table(head, rows, empty) {
  if (!rows.length) return `<p class="muted">${esc(empty || 'Nothing here.')}</p>`;
  return `<div class="scroll"><table><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows.map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join('')}</tr>`).join('')}</tbody></table></div>`;
}

function options(values, selected, all) {
  const opts = all === undefined ? [] : [`<option value="">${esc(all)}</option>`];
  for (const v of values) opts.push(`<option value="${esc(v)}"${v === selected ? ' selected' : ''}>${esc(v)}</option>`);
  return opts.join('');
}

function uniq(list) { return [...new Set(list.filter((x) => x !== undefined && x !== null && x !== ''))].sort(); }

function notice(msg) {
  const n = document.getElementById('notice');
  n.textContent = msg || '';
  n.hidden = !msg;
}

// use is how much of a device is taken, 0..1.
function use(d) {
  if (!d.allocations || !d.allocations.length) return 0;
  if (!d.shareable) return 1;
  const caps = d.capabilities || {};
  let u = 0;
  for (const k of ['memory_gb', 'compute_units', 'storage_gb', 'bandwidth_gbps']) {
    if (caps[k] > 0) u = Math.max(u, ((d.used && d.used[k]) || 0) / caps[k]);
  }
  return u || 0.01;
}

function useClass(u) { return u <= 0 ? 'u0' : u < 0.34 ? 'u1' : u < 0.67 ? 'u2' : u < 1 ? 'u3' : 'u4'; }

// ---- views ----

const views = {};

views.overview = {
  title: 'Overview',
  mount(el) { el.innerHTML = '<h1>Overview</h1><div id="results"></div>'; },
  async update() {
    const [self, members, raft, health, hosts, stats, queue] = await Promise.all([
      get('/v1/agent/self'), get('/v1/cluster/members'), get('/v1/cluster/raft'), get('/v1/health'),
      get('/v1/hosts'), get('/v1/stats'), get(withNS('/v1/queue')),
    ]);
    const st = self.status || {};
    const servers = members.filter((m) => m.server);
    const voters = new Map((raft.servers || []).map((s) => [s.id, s]));
    const leader = servers.find((m) => m.leader);
    const up = hosts.filter((h) => h.up).length;
    const drained = hosts.filter((h) => h.drain).length;
    const alarms = [...(health.alarms || [])];
    if (health.status !== 'ok') alarms.push(`${health.node}: ${health.reason || health.status}`);
    for (const m of servers) if (m.status !== 'alive') alarms.push(`server ${m.id} is ${m.status}`);
    for (const m of servers) if (m.integrity && m.integrity !== 'ok') alarms.push(`server ${m.id}: integrity ${m.integrity}`);
    for (const h of hosts) if (!h.up) alarms.push(`host ${h.id} is down since ${when(h.since)}`);
    if (!st.known_leader) alarms.push('this node knows no leader');
    let devices = 0, inUse = 0;
    for (const s of stats) if (s.pool === '*') { devices += s.devices.total; inUse += s.devices.in_use; }
    const card = (label, value, cls) => `<div class="card ${cls || ''}"><div class="label">${esc(label)}</div><div class="value">${value}</div></div>`;
    const aliveServers = servers.filter((m) => m.status === 'alive').length;
    return `<div class="cards">
      ${card('Leader', esc(leader ? leader.id : 'none'), leader ? 'ok' : 'bad')}
      ${card('Servers alive', `${aliveServers}/${servers.length}`, aliveServers * 2 > servers.length ? 'ok' : 'bad')}
      ${card('Raft term', esc(st.term))}
      ${card('Commit / applied', `${esc(st.commit_index)} / ${esc(st.applied_index)}`)}
      ${card('Hosts up', `${up}/${hosts.length}`, up === hosts.length ? 'ok' : 'bad')}
      ${card('Hosts drained', drained)}
      ${card('Devices in use', `${inUse}/${devices}`)}
      ${card('Queued', queue.length)}
      ${card('Alarms', alarms.length, alarms.length ? 'bad' : 'ok')}
    </div>
    <h2>Alarms</h2>
    ${alarms.length ? `<ul class="alarms">${alarms.map((a) => `<li>${esc(a)}</li>`).join('')}</ul>` : '<p class="muted">None.</p>'}
    <h2>Servers</h2>
    ${table(['ID', 'Status', 'Raft', 'Voter', 'Version', 'Level', 'Raft address', 'HTTP'], servers.map((m) => [
      `<b>${esc(m.id)}</b>`, badge(m.status === 'alive' ? 'up' : 'down') + ' ' + esc(m.status),
      m.leader ? badge('leader') : 'follower', voters.has(m.id) ? (voters.get(m.id).voter ? 'yes' : 'non-voter') : 'not in config',
      esc(m.version), esc(m.feature_level || ''), `<code>${esc(m.raft_addr)}</code>`, `<code>${esc(m.http_addr)}</code>`]), 'No servers in gossip.')}
    <h2>This node</h2>
    ${kv([['Node', esc(st.id)], ['Role', esc(self.role)], ['Version', esc(self.version)], ['Raft state', esc(st.state)],
      ['Last contact', esc(st.last_contact)], ['Ready', st.ready ? 'yes' : esc(st.reason || 'no')]])}`;
  },
};

views.devices = {
  title: 'Devices',
  mount(el) {
    const f = filters('devices', { type: '', model: '', pool: '', status: '', host: '' });
    el.innerHTML = `<h1>Devices</h1>
      <div class="toolbar" id="device-filters">
        <label>Type <select data-filter="type"></select></label>
        <label>Model <select data-filter="model"></select></label>
        <label>Pool <select data-filter="pool"></select></label>
        <label>Status <select data-filter="status"></select></label>
        <label>Host <input data-filter="host" size="12" placeholder="any" value="${esc(f.host)}"></label>
      </div>
      <div class="legend"><span><span class="cell u0"></span> free</span><span><span class="cell u2"></span> partly used</span>
        <span><span class="cell u4"></span> full</span><span><span class="cell u0 draining"></span> draining</span>
        <span><span class="cell u0 unhealthy"></span> unhealthy</span><span><span class="cell offline"></span> offline</span></div>
      <div class="split"><div id="results"></div><div class="panel" id="device-panel"></div></div>`;
    bindFilters(el, 'devices');
  },
  async update() {
    const [hosts, devices] = await Promise.all([get('/v1/hosts'), get('/v1/devices')]);
    this.data = { hosts, devices };
    return this.render();
  },
  render() {
    const { hosts, devices } = this.data;
    const f = ui.filters.devices;
    fillSelect('type', uniq(devices.map((d) => d.type)), f.type, 'all');
    fillSelect('model', uniq(devices.map((d) => d.name)), f.model, 'all');
    fillSelect('pool', uniq(devices.map((d) => d.pool)), f.pool, 'all');
    fillSelect('status', ['available', 'draining', 'unhealthy', 'offline', 'in use', 'free'], f.status, 'all');
    const byHost = new Map(hosts.map((h) => [h.id, []]));
    for (const d of devices) {
      if (f.type && d.type !== f.type) continue;
      if (f.model && d.name !== f.model) continue;
      if (f.pool && d.pool !== f.pool) continue;
      if (f.status === 'in use' ? !(d.allocations && d.allocations.length) : f.status === 'free' ? (d.allocations && d.allocations.length) : f.status && d.status !== f.status) continue;
      if (!byHost.has(d.host)) byHost.set(d.host, []);
      byHost.get(d.host).push(d);
    }
    const hostByID = new Map(hosts.map((h) => [h.id, h]));
    const rows = [];
    let shown = 0;
    for (const [id, list] of byHost) {
      if (f.host && !id.includes(f.host)) continue;
      if (!list.length && (f.type || f.model || f.pool || f.status)) continue;
      const h = hostByID.get(id) || { id, up: false };
      shown += list.length;
      const cells = list.map((d) => {
        const cls = ['cell', d.status === 'offline' ? 'offline' : useClass(use(d))];
        if (d.status === 'draining' || d.status === 'unhealthy') cls.push(d.status);
        if (ui.selected === d.id) cls.push('selected');
        return `<button type="button" class="${cls.join(' ')}" data-device="${esc(d.id)}" title="${esc(`${d.id} · ${d.type} ${d.name || ''} · ${d.status} · ${(d.allocations || []).length} allocation(s)`)}"></button>`;
      }).join('');
      const drainBtn = h.drain
        ? `<button type="button" data-action="undrain-host" data-id="${esc(id)}">Undrain host</button>`
        : `<button type="button" data-action="drain-host" data-id="${esc(id)}">Drain host</button>`;
      rows.push(`<div class="hostrow" data-host="${esc(id)}"><div><div class="hostname">${esc(id)}</div><div class="hostmeta">${badge(h.up ? 'up' : 'down')}${h.drain ? badge('drained') : ''}<span class="muted">${list.length} dev</span>${hostByID.has(id) ? drainBtn : ''}</div></div><div class="cells">${cells || '<span class="muted">no devices</span>'}</div></div>`);
    }
    const html = `<p class="muted">${shown} of ${devices.length} devices on ${rows.length} of ${hosts.length} hosts.</p><div class="grid">${rows.join('')}</div>`;
    const el = document.getElementById('results');
    el.innerHTML = html;
    this.showPanel();
    return null;
  },
  showPanel() {
    const panel = document.getElementById('device-panel');
    if (!panel) return;
    const d = ui.selected && this.data.devices.find((x) => x.id === ui.selected);
    if (!d) { panel.innerHTML = '<p class="muted">Select a device to see it and drain it.</p>'; return; }
    const action = d.status === 'available'
      ? `<button type="button" class="primary" data-action="drain-device" data-id="${esc(d.id)}">Drain</button>`
      : d.status === 'offline' ? '' : `<button type="button" class="primary" data-action="undrain-device" data-id="${esc(d.id)}">Make available</button>`;
    panel.innerHTML = `<h2 id="device-title">${esc(d.id)}</h2>${kv([
      ['Type', esc(d.type)], ['Model', esc(d.name || '–')], ['Host', esc(d.host)], ['Pool', esc(d.pool || '–')],
      ['Status', `<span id="device-status">${badge(d.status)}</span>`], ['Shareable', d.shareable ? 'yes' : 'no'],
      ['Capacity', esc(resources(d.capabilities))], ['Used', esc(resources(d.used))], ['Labels', labels(d.labels)],
      ['Allocations', (d.allocations || []).map((a) => `<a href="#/allocations/${esc(a)}"><code>${esc(a.slice(0, 8))}</code></a>`).join(' ') || '–'],
    ])}<p>${action}</p>`;
  },
  click(e) {
    const cell = e.target.closest('[data-device]');
    if (cell) {
      ui.selected = cell.dataset.device;
      document.querySelectorAll('.cell.selected').forEach((c) => c.classList.remove('selected'));
      cell.classList.add('selected');
      this.showPanel();
      return true;
    }
    return false;
  },
};

views.allocations = {
  title: 'Allocations',
  mount(el) {
    filters('allocations', { tab: 'active', type: '', pool: '', host: '', status: '' });
    el.innerHTML = `<h1>Allocations</h1>
      <div class="toolbar">
        <div class="tabs" id="alloc-tabs">
          <button type="button" data-tab="active">Active</button>
          <button type="button" data-tab="queued">Queued</button>
          <button type="button" data-tab="history">History</button>
        </div>
        <label>Type <select data-filter="type">${options(['CPU', 'GPU', 'Memory', 'Storage', 'Network', 'Sensor', 'Actuator', 'Custom'], ui.filters.allocations.type, 'all')}</select></label>
        <label>Pool <input data-filter="pool" size="8" placeholder="any" value="${esc(ui.filters.allocations.pool)}"></label>
        <label>Host <input data-filter="host" size="10" placeholder="any" value="${esc(ui.filters.allocations.host)}"></label>
        <label>Status <select data-filter="status">${options(['released', 'expired', 'timed_out', 'preempted', 'lost', 'failed', 'cancelled', 'drained'], ui.filters.allocations.status, 'any ended')}</select></label>
      </div>
      <div id="results"></div>`;
    bindFilters(el, 'allocations');
    this.tabs();
  },
  tabs() {
    const tab = ui.filters.allocations.tab;
    document.querySelectorAll('#alloc-tabs button').forEach((b) => b.classList.toggle('active', b.dataset.tab === tab));
    // Only the history has statuses to choose from; the queue has no host.
    document.querySelector('[data-filter="status"]').closest('label').hidden = tab !== 'history';
    document.querySelector('[data-filter="host"]').closest('label').hidden = tab === 'queued';
  },
  async update() {
    const f = ui.filters.allocations;
    const q = new URLSearchParams();
    if (f.type) q.set('type', f.type);
    if (f.pool) q.set('pool', f.pool);
    if (f.host) q.set('host', f.host);
    let list;
    if (f.tab === 'queued') {
      list = await get(withNS('/v1/queue'));
      list = list.filter((a) => (!f.type || a.request.claims.some((c) => c.type === f.type)) && (!f.pool || a.request.pool === f.pool || a.request.claims.some((c) => c.pool === f.pool)));
    } else if (f.tab === 'history') {
      q.set('reverse', 'true');
      q.set('limit', '200');
      if (f.status) q.set('status', f.status);
      list = (await get(withNS('/v1/history?' + q))).allocations;
    } else {
      q.set('status', 'active');
      q.set('limit', '1000');
      list = (await get(withNS('/v1/allocations?' + q))).allocations;
    }
    const id = (a) => `<a href="#/allocations/${esc(a.id)}"><code>${esc(a.id.slice(0, 8))}</code></a>`;
    if (f.tab === 'queued') {
      return table(['#', 'ID', 'Namespace', 'Claims', 'Priority', 'Waiting since', 'Deadline', 'Why not yet'], list.map((a, i) => [
        String(i + 1), id(a), esc(a.namespace), claims(a.request), esc(a.request.priority || 0), esc(ago(a.requested_at)),
        a.deadline ? `${esc(when(a.deadline))} <span class="muted">(${esc(ago(a.deadline))})</span>` : '–',
        `<span class="why">${esc((a.why_not && a.why_not.summary) || '')}</span>`]), 'No request is waiting.');
    }
    if (f.tab === 'history') {
      return table(['ID', 'Status', 'Namespace', 'Claims', 'Host', 'Requested', 'Ended', 'Reason'], list.map((a) => [
        id(a), badge(a.status), esc(a.namespace), claims(a.request), hosts(a), esc(when(a.requested_at)), esc(when(a.ended_at)),
        esc(a.reason || (a.why_not && a.why_not.summary) || '')]), 'The history is empty.');
    }
    return table(['ID', 'Status', 'Namespace', 'Claims', 'Host', 'Devices', 'Policy', 'Allocated', 'Lease'], list.map((a) => [
      id(a), allocBadge(a), esc(a.namespace), claims(a.request), hosts(a),
      (a.devices || []).map((d) => `<code>${esc(d.device_id)}</code>`).join(' '), esc(a.policy), esc(when(a.allocated_at)),
      a.lease_expires_at ? esc(ago(a.lease_expires_at)) : 'none']), 'No allocation is active.');
  },
  click(e) {
    const tab = e.target.closest('[data-tab]');
    if (!tab) return false;
    ui.filters.allocations.tab = tab.dataset.tab;
    this.tabs();
    refresh();
    return true;
  },
};

views.allocation = {
  title: 'Allocation',
  mount(el) { el.innerHTML = '<h1>Allocation <code id="alloc-id"></code></h1><div id="results"></div>'; document.getElementById('alloc-id').textContent = ui.params[0] || ''; },
  async update() {
    const a = await get(withNS('/v1/allocations/' + encodeURIComponent(ui.params[0] || '')));
    const actions = a.status === 'active' ? `<button type="button" class="danger" data-action="release" data-id="${esc(a.id)}">Release</button>`
      : a.status === 'pending' ? `<button type="button" class="danger" data-action="cancel" data-id="${esc(a.id)}">Cancel</button>` : '';
    const req = a.request || {};
    let html = kv([
      ['ID', `<code>${esc(a.id)}</code>`], ['Status', allocBadge(a)], ['Namespace', esc(a.namespace)], ['Request ID', esc(a.request_id || '–')],
      ['Policy', esc(a.policy)], ['Priority', esc(req.priority || 0)], [a.hosts && a.hosts.length ? 'Hosts' : 'Host', hosts(a)],
      ['Reserved hosts', a.reserved ? `${esc(a.reserved.join(', '))}; expected start ${a.expected_start ? esc(when(a.expected_start)) : 'unknown'}` : '–'],
      ['Requested', esc(when(a.requested_at))], ['Allocated', esc(when(a.allocated_at))], ['Ended', esc(when(a.ended_at))],
      ['Deadline', a.deadline ? `${esc(when(a.deadline))} (${esc(ago(a.deadline))})` : '–'],
      ['Lease expires', a.lease_expires_at ? `${esc(when(a.lease_expires_at))} (${esc(ago(a.lease_expires_at))})` : '–'],
      ['Reclaimed', a.preempting ? `by <code>${esc(a.preempting.by)}</code>, preempted at ${esc(when(a.preempting.deadline))} (${esc(ago(a.preempting.deadline))})` : '–'],
      ['Reason', esc(a.reason || '–')], ['Preempted by', esc(a.preempted_by || '–')], ['Preempted', esc((a.preempted || []).join(', ') || '–')],
    ]);
    if (actions) html += `<p>${actions}</p>`;
    html += '<h2>Claims</h2>' + table(['#', 'Type', 'Count', 'Pool', 'At least', 'Amount'], (req.claims || []).map((c, i) => [
      String(i), esc(c.type), esc(c.count), esc(c.pool || req.pool || '–'), esc(resources(c.capabilities)), esc(resources(c.amount))]));
    if (a.devices && a.devices.length) {
      html += '<h2>Devices</h2>' + table(['Device', 'Claim', 'Amount'], a.devices.map((d) => [`<code>${esc(d.device_id)}</code>`, esc(d.claim), esc(resources(d.amount))]));
    }
    const w = a.why_not;
    if (w) {
      html += `<h2>Why not</h2><div id="why-not"><p class="why">${esc(w.summary)}</p><p class="muted">${esc(w.devices)} devices on ${esc(w.hosts)} hosts considered${w.hosts_rejected ? `; ${esc(w.hosts_rejected)} hosts had devices for each claim but not for all together` : ''}.</p>`;
      for (const c of w.claims || []) {
        html += `<h3>Claim ${esc(c.claim)}: ${esc(c.count)}× ${esc(c.type)}</h3>` + table(['Dropped because', 'Devices'],
          (c.removed || []).map((r) => [esc(r.reason), `<span class="num">${esc(r.count)}</span>`]), 'No device was dropped.')
          + `<p class="muted">${esc(c.fitting)} fitting devices; ${esc(c.hosts_with_some)} hosts with some, ${esc(c.hosts_with_enough)} with enough.</p>`;
      }
      const g = w.gang;
      if (g) {
        html += `<h3>Gang: ${esc(g.count)} devices over at most ${esc(g.max_hosts)} hosts, at least ${esc(g.min_per_host)} each${g.same ? ', one ' + esc(g.same) : ''}</h3>`
          + `<p class="muted">${esc(g.hosts_able)} hosts could take a part; the best ${esc((g.best || []).length)} could take ${esc(g.best_total)}.</p>`
          + table(['Host', 'Could take'], (g.best || []).map((h) => [esc(h.host), `<span class="num">${esc(h.take)}</span>`]), 'No host could take a part.');
        if (g.same) {
          html += table([g.same, 'Hosts able', 'Could take'], (g.domains || []).map((d) => [esc(d.value), esc(d.hosts_able), `<span class="num">${esc(d.total)}</span>`]), `No host carries ${g.same}.`);
        }
      }
      html += '</div>';
    }
    return html;
  },
};

const POLICIES = ['FirstFit', 'BestFit', 'WorstFit', 'RoundRobin', 'PriorityBased', 'LoadBalanced', 'FragmentationAware'];

views.policies = {
  title: 'Policies',
  mount(el) { el.innerHTML = '<h1>Policies</h1><div id="results"></div>'; },
  async update() {
    const [pol, pools] = await Promise.all([get('/v1/policies'), get('/v1/pools')]);
    const types = Object.keys(pol.types || {}).sort();
    const row = (kind, name, cfg) => [
      `<b>${esc(name)}</b>`,
      `<select data-policy="${kind}:${esc(name)}">${kind === 'pool' ? '<option value="">(type default)</option>' : ''}${options(POLICIES, cfg ? cfg.policy : '')}</select>`,
      `<input type="number" min="0" max="1000" size="4" data-gap="${kind}:${esc(name)}" value="${esc(cfg && cfg.preemption_gap ? cfg.preemption_gap : '')}" placeholder="10">`,
      `<button type="button" data-action="save-policy" data-id="${kind}:${esc(name)}">Save</button>`,
    ];
    const poolNames = uniq([...pools.map((p) => p.name), ...Object.keys(pol.pools || {})]);
    const poolInfo = new Map(pools.map((p) => [p.name, p]));
    return `<h2>By device type</h2>${table(['Type', 'Policy', 'Preemption gap', ''], types.map((t) => row('type', t, pol.types[t])))}
      <h2>Pool overrides</h2>
      <p class="muted">A pool's override beats its type's policy for requests in that pool.</p>
      ${table(['Pool', 'Override', 'Preemption gap', '', 'Devices', 'Types'], poolNames.map((p) => [...row('pool', p, (pol.pools || {})[p]),
        esc(poolInfo.has(p) ? poolInfo.get(p).devices.total : 0), esc(poolInfo.has(p) ? (poolInfo.get(p).types || []).join(', ') : '')]), 'No pools.')}`;
  },
};

views.stats = {
  title: 'Statistics',
  mount(el) {
    el.innerHTML = `<h1>Statistics</h1><p class="muted">Charts show what this browser tab sampled (every ${SAMPLE_EVERY / 1000} s and on changes) since it opened.</p>
      <div class="charts" id="charts"></div><div id="results"></div>`;
  },
  async update() {
    const [stats, recs] = await Promise.all([get('/v1/stats'), get(withNS('/v1/recommendations'))]);
    sample(stats);
    drawCharts();
    const all = stats.filter((s) => s.pool === '*');
    let html = '<h2>Now</h2>' + table(['Type', 'Policy', 'Utilisation', 'Fragmentation', 'Devices in use', 'Success', 'Refused', 'Queue wait p50', 'p95', 'Held p50'], all.map((s) => [
      `<b>${esc(s.type)}</b>`, esc(s.policy.policy), pct(s.utilisation), pct(s.fragmentation), `${esc(s.devices.in_use)}/${esc(s.devices.total)}`,
      pct(s.success_rate), esc(s.counts.failed + s.counts.timed_out), `${num(s.queue_wait.p50_s)} s`, `${num(s.queue_wait.p95_s)} s`, `${num(s.duration.p50_s)} s`]), 'No devices.');
    const pools = stats.filter((s) => s.pool !== '*');
    if (pools.length) {
      html += '<h2>By pool</h2>' + table(['Type', 'Pool', 'Policy', 'Utilisation', 'Devices in use', 'Refused'], pools.map((s) => [
        esc(s.type), s.pool ? esc(s.pool) : '<span class="muted">(none)</span>', esc(s.policy.policy), pct(s.utilisation), `${esc(s.devices.in_use)}/${esc(s.devices.total)}`, esc(s.counts.failed + s.counts.timed_out)]));
    }
    html += '<h2>Recommendations</h2>';
    if (!recs.length) html += '<p class="muted">None: nothing to change.</p>';
    for (const r of recs) {
      const ev = Object.keys(r.evidence || {}).sort();
      html += `<div class="rec"><div class="head">${badge(r.priority)} <b>${esc(r.kind.replace(/_/g, ' '))}</b> <span>${esc(r.type)}${r.pool ? ' @' + esc(r.pool) : ''}</span>
        <span class="muted">confidence ${pct(r.confidence)}</span></div><div>${esc(r.message)}</div>
        ${ev.length ? `<div class="muted">Evidence: ${ev.map((k) => `<code>${esc(k)}=${esc(num(r.evidence[k]))}</code>`).join(' ')}</div>` : ''}
        ${r.devices && r.devices.length ? `<div class="muted">Devices: ${r.devices.map((d) => `<code>${esc(d)}</code>`).join(' ')}</div>` : ''}</div>`;
    }
    return html;
  },
};

// ---- statistics over time ----

function loadSeries() {
  try { return JSON.parse(sessionStorage.getItem(SERIES_KEY) || '[]'); } catch (e) { return []; }
}

// sample records, per device type, utilisation, queue wait p95 and the
// refusals so far.
function sample(stats) {
  const now = Date.now();
  const last = ui.series[ui.series.length - 1];
  if (last && now - last.t < 1000) return;
  const point = { t: now, v: {} };
  for (const s of stats) {
    if (s.pool !== '*') continue;
    point.v[s.type] = [s.utilisation, s.queue_wait.p95_s, s.counts.failed + s.counts.timed_out];
  }
  ui.series.push(point);
  if (ui.series.length > SERIES_MAX) ui.series.splice(0, ui.series.length - SERIES_MAX);
  try { sessionStorage.setItem(SERIES_KEY, JSON.stringify(ui.series)); } catch (e) { /* full: keep it in memory */ }
}

const CHARTS = [
  { title: 'Utilisation', idx: 0, fmt: pct, max: 1 },
  { title: 'Queue wait p95 (s)', idx: 1, fmt: num },
  { title: 'Refusals per sample', idx: 2, fmt: num, delta: true },
];

function drawCharts() {
  const el = document.getElementById('charts');
  if (!el) return;
  const pts = ui.series;
  const types = uniq(pts.flatMap((p) => Object.keys(p.v)));
  const W = 300, H = 110, L = 34, B = 14;
  el.innerHTML = CHARTS.map((c) => {
    const lines = types.map((t) => pts.map((p, i) => {
      const v = p.v[t];
      if (!v) return null;
      if (!c.delta) return [p.t, v[c.idx]];
      const prev = i > 0 && pts[i - 1].v[t];
      return [p.t, prev ? Math.max(0, v[c.idx] - prev[c.idx]) : 0];
    }).filter(Boolean));
    const ys = lines.flat().map((p) => p[1]);
    const max = c.max || Math.max(1, ...ys);
    const t0 = pts.length ? pts[0].t : 0, t1 = pts.length ? pts[pts.length - 1].t : 1;
    const x = (t) => L + (t1 > t0 ? ((t - t0) / (t1 - t0)) * (W - L - 4) : (W - L) / 2);
    const y = (v) => H - B - (v / max) * (H - B - 6);
    const colours = ['#2f5bd3', '#1f8a4c', '#b7791f', '#c0362c', '#7c3aed', '#0e7490', '#be185d', '#4b5563'];
    const paths = lines.map((l, i) => l.length > 1
      ? `<polyline fill="none" stroke="${colours[i % 8]}" stroke-width="1.6" points="${l.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ')}"/>`
      : l.length ? `<circle r="2.5" fill="${colours[i % 8]}" cx="${x(l[0][0]).toFixed(1)}" cy="${y(l[0][1]).toFixed(1)}"/>` : '').join('');
    const mins = (t1 - t0) / 60000;
    const span = t1 > t0 ? (mins < 2 ? `${Math.round(mins * 60)} s ago` : `${Math.round(mins)} min ago`) : 'first sample';
    return `<div class="chart"><h3>${esc(c.title)}</h3><svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img" aria-label="${esc(c.title)}">
      <line class="axis" x1="${L}" y1="${H - B}" x2="${W}" y2="${H - B}"/><line class="axis" x1="${L}" y1="4" x2="${L}" y2="${H - B}"/>
      <text x="2" y="10">${esc(c.fmt(max))}</text><text x="2" y="${H - B}">0</text><text x="${L}" y="${H - 2}">${esc(span)}</text><text x="${W - 24}" y="${H - 2}">now</text>
      ${paths}</svg><div class="series-legend">${types.map((t, i) => `<span><span class="swatch c${i % 8}"></span>${esc(t)}</span>`).join('')}</div></div>`;
  }).join('');
}

async function sampler() {
  try {
    const stats = await get('/v1/stats');
    sample(stats);
    if (ui.view === views.stats) drawCharts();
  } catch (e) { /* the next sample tries again */ }
}

// ---- actions ----

const actions = {
  'drain-device': (id) => api('POST', `/v1/devices/${encodeURIComponent(id)}/drain`, {}),
  'undrain-device': (id) => api('POST', `/v1/devices/${encodeURIComponent(id)}/undrain`, {}),
  'drain-host': (id) => {
    const d = prompt(`Drain host ${id}. Deadline for running allocations (such as 1h; empty: none):`, '');
    if (d === null) return null;
    return api('POST', `/v1/hosts/${encodeURIComponent(id)}/drain`, d.trim() ? { deadline: d.trim() } : {});
  },
  'undrain-host': (id) => api('POST', `/v1/hosts/${encodeURIComponent(id)}/undrain`, {}),
  release: (id) => api('POST', withNS(`/v1/allocations/${encodeURIComponent(id)}/release`), {}),
  cancel: (id) => api('POST', withNS(`/v1/allocations/${encodeURIComponent(id)}/cancel`), {}),
  'save-policy': (id) => {
    const [kind, name] = id.split(/:(.*)/s);
    const policy = document.querySelector(`[data-policy="${CSS.escape(id)}"]`).value;
    const gapText = document.querySelector(`[data-gap="${CSS.escape(id)}"]`).value;
    const body = { policy };
    if (gapText) body.preemption_gap = Number(gapText);
    return kind === 'type' ? api('PUT', `/v1/policies/${encodeURIComponent(name)}`, body)
      : policy ? api('PUT', `/v1/pools/${encodeURIComponent(name)}/policy`, body) : api('DELETE', `/v1/pools/${encodeURIComponent(name)}/policy`, {});
  },
};

async function act(name, id) {
  try {
    const p = actions[name](id);
    if (!p) return;
    await p;
    notice('');
    refresh();
  } catch (e) {
    handleError(e);
  }
}

// ---- filters ----

function filters(view, defaults) {
  ui.filters[view] = Object.assign({}, defaults, ui.filters[view] || {});
  return ui.filters[view];
}

function fillSelect(name, values, selected, all) {
  const el = document.querySelector(`[data-filter="${name}"]`);
  if (!el) return;
  const html = options(values, selected, all);
  if (el.dataset.html !== html) { el.innerHTML = html; el.dataset.html = html; }
}

function bindFilters(el, view) {
  el.querySelectorAll('[data-filter]').forEach((input) => {
    const handler = () => {
      ui.filters[view][input.dataset.filter] = input.value;
      if (ui.view.render && ui.view.data) ui.view.render(); else refresh();
    };
    input.addEventListener(input.tagName === 'SELECT' ? 'change' : 'input', handler);
  });
}

// ---- routing and refresh ----

let refreshing = null, again = false;

// refresh fetches the mounted view's data and renders it; calls while one
// runs fold into one more after it.
function refresh() {
  if (refreshing) { again = true; return refreshing; }
  const view = ui.view;
  refreshing = (async () => {
    try {
      const html = await view.update();
      if (view !== ui.view) return;
      if (html !== null && html !== undefined) {
        document.getElementById('results').innerHTML = html;
      }
      notice('');
    } catch (e) {
      if (view === ui.view) handleError(e);
    }
  })().finally(() => {
    refreshing = null;
    if (again) { again = false; refresh(); }
  });
  return refreshing;
}

function handleError(e) {
  if (e instanceof APIError && (e.status === 401 || e.status === 403)) {
    notice(`${e.message} (${e.code}). Set a token with the rights this page needs.`);
    askToken(e.message);
    return;
  }
  notice(e.message || String(e));
}

function route() {
  const parts = (location.hash.replace(/^#\/?/, '') || 'overview').split('/').map(decodeURIComponent);
  let name = parts[0];
  if (name === 'allocations' && parts[1]) name = 'allocation';
  const view = views[name] || views.overview;
  ui.params = parts.slice(1);
  ui.view = view;
  document.title = `${view.title} · dmsc`;
  document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === (name === 'allocation' ? 'allocations' : name)));
  view.mount(document.getElementById('view'));
  refresh();
}

// ---- event stream ----

let streamIndex = 0, streamAbort = null, pending = null;

function setLive(on) {
  const el = document.getElementById('live');
  el.textContent = on ? 'live' : 'offline';
  el.className = 'live ' + (on ? 'on' : 'off');
}

// onEvents refreshes the view once per burst of changes.
function onEvents(events) {
  if (!events.length || pending) return;
  const big = ui.view === views.devices && ui.view.data && ui.view.data.devices.length > 2000;
  pending = setTimeout(() => { pending = null; refresh(); }, big ? 1000 : 100);
}

async function stream() {
  for (;;) {
    streamAbort = new AbortController();
    try {
      const q = streamIndex ? `?index=${streamIndex}&namespace=*` : '?namespace=*';
      const r = await fetch('/v1/event/stream' + q, { headers: headers(false), signal: streamAbort.signal });
      if (r.status === 401 || r.status === 403) { setLive(false); return; }
      if (r.status === 410) { streamIndex = 0; continue; }
      if (!r.ok) throw new Error(`event stream: ${r.status}`);
      setLive(true);
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (!line) continue;
          const b = JSON.parse(line);
          if (b.error) { streamIndex = 0; onEvents([b]); break; }
          if (b.index) { streamIndex = b.index; onEvents(b.events || []); }
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') return;
    }
    setLive(false);
    await new Promise((ok) => setTimeout(ok, 2000));
  }
}

function restartStream() {
  if (streamAbort) streamAbort.abort();
  streamIndex = 0;
  stream();
}

// ---- token ----

function askToken(why) {
  const dlg = document.getElementById('token-dialog');
  document.getElementById('token-why').textContent = (why ? why + '. ' : '') + 'The token is kept in this browser tab\u2019s session only.';
  document.getElementById('token-input').value = ui.token;
  if (!dlg.open) dlg.showModal();
}

function setToken(t) {
  ui.token = t;
  if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
  restartStream();
  route();
}

// ---- start ----

function start() {
  const ns = document.getElementById('namespace');
  ns.value = ui.namespace;
  ns.addEventListener('change', () => {
    ui.namespace = ns.value.trim() || 'default';
    sessionStorage.setItem(NS_KEY, ui.namespace);
    refresh();
  });
  document.getElementById('token-button').addEventListener('click', () => askToken(''));
  const dlg = document.getElementById('token-dialog');
  document.getElementById('token-save').addEventListener('click', () => { dlg.close(); setToken(document.getElementById('token-input').value.trim()); });
  document.getElementById('token-clear').addEventListener('click', () => { dlg.close(); setToken(''); });
  document.getElementById('token-cancel').addEventListener('click', () => dlg.close());
  document.getElementById('view').addEventListener('click', (e) => {
    const a = e.target.closest('[data-action]');
    if (a) { act(a.dataset.action, a.dataset.id); return; }
    if (ui.view.click) ui.view.click(e);
  });
  window.addEventListener('hashchange', route);
  route();
  stream();
  setInterval(sampler, SAMPLE_EVERY);
  setInterval(() => { if (ui.view === views.overview || ui.view === views.allocations) refresh(); }, 15000);
}

start();
