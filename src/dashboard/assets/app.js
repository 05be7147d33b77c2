// Skiplock dashboard: plain DOM, no framework, no CDN. Every refresh patches the page in place
// (rows keyed by job id, text nodes updated only when they change), so auto-refresh never
// flickers or steals focus.
const REFRESH_MS = 2000;
const PAGE_SIZE = 25;
const STATUSES = ['waiting', 'pending', 'running', 'done', 'dead', 'cancelled'];
const $ = (id) => document.getElementById(id);

const state = {
  token: sessionStorage.getItem('skiplock-token') || '',
  filters: { status: '', task: '', queue: '' },
  /** Keyset cursors of the pages before the current one; the current page starts after `after`. */
  pages: [],
  after: '',
  next: null,
  openJob: null,
  /** The flow page's state: `{ id, key, at, large }`, or null on the overview (SPEC §10). */
  flow: null,
  timer: null,
  busy: false,
  again: false,
};

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

async function api(path, options = {}) {
  const headers = { Accept: 'application/json' };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  const response = await fetch(`/api${path}`, { ...options, headers });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// ---------------------------------------------------------------- helpers

function setText(node, text) {
  const value = String(text);
  if (node.textContent !== value) node.textContent = value;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function number(n) {
  return Number(n).toLocaleString('en-US');
}

function relative(iso) {
  if (!iso) return '—';
  const delta = Date.parse(iso) - Date.now();
  const abs = Math.abs(delta);
  const unit =
    abs < 1000
      ? null
      : abs < 60000
        ? [Math.round(abs / 1000), 's']
        : abs < 3600000
          ? [Math.round(abs / 60000), 'min']
          : abs < 86400000
            ? [Math.round(abs / 3600000), 'h']
            : [Math.round(abs / 86400000), 'd'];
  if (!unit) return 'now';
  return delta < 0 ? `${unit[0]} ${unit[1]} ago` : `in ${unit[0]} ${unit[1]}`;
}

function seconds(s) {
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

function statusBadge(status) {
  return el('span', { class: `status ${status}` }, status);
}

function connection(ok, text) {
  const pill = $('connection');
  setText(pill, text);
  pill.className = `pill ${ok ? 'ok' : 'bad'}`;
}

// ---------------------------------------------------------------- counts, signals, queues

function renderOps(ops) {
  for (const status of STATUSES) {
    const value = document.querySelector(`.count.${status} .value`);
    const approx = ops.estimated.includes(status) ? '~' : '';
    setText(value, `${approx}${number(ops[status])}`);
  }
  const signals = {
    dead1h: [number(ops.dead1h), ops.dead1h > 0],
    stuckRunning: [number(ops.stuckRunning), ops.stuckRunning > 0],
    oldestPendingSec: [seconds(ops.oldestPendingSec), ops.oldestPendingSec > 60],
    deadline1h: [number(ops.deadline1h), ops.deadline1h > 0],
  };
  // Shown only when the figures come from a read replica (replicaLagMs is null otherwise).
  const lagShown = typeof ops.replicaLagMs === 'number';
  document.querySelector('[data-signal="replicaLagMs"]').parentElement.hidden = !lagShown;
  if (lagShown) signals.replicaLagMs = [`${number(ops.replicaLagMs)} ms`, ops.replicaLagMs >= 1000];
  renderReplica(ops.replica);
  for (const [key, [text, alert]] of Object.entries(signals)) {
    const dd = document.querySelector(`[data-signal="${key}"]`);
    setText(dd, text);
    dd.classList.toggle('alert', alert);
  }
}

// The read replica (issue 26): said only while it is not the source of the figures.
function renderReplica(replica) {
  const note = $('replica-status');
  note.hidden = !replica || replica.status === 'up';
  if (note.hidden) return;
  const since = new Date(replica.since).toLocaleTimeString();
  setText(
    note,
    replica.status === 'down'
      ? `Read replica unreachable since ${since}: counts, job lists and details come from the primary until it answers. ${replica.error ?? ''}`
      : 'Read replica not reached yet: counts, job lists and details come from the primary.',
  );
}

function limitsText(q) {
  const parts = [];
  if (q.concurrency !== null) parts.push(`≤ ${number(q.concurrency)} at once`);
  if (q.rateLimit !== null)
    parts.push(`${number(q.rateLimit.limit)} per ${seconds(q.rateLimit.periodMs / 1000)}`);
  if (q.groupConcurrency !== null) parts.push(`≤ ${number(q.groupConcurrency)} per group at once`);
  if (q.groupRateLimit !== null)
    parts.push(
      `${number(q.groupRateLimit.limit)} per group per ${seconds(q.groupRateLimit.periodMs / 1000)}`,
    );
  return parts.length ? parts.join(', ') : '—';
}

function renderQueues({ queues }) {
  const body = $('queues');
  // Queue names are data: an array from the API, shown as text nodes (a queue may be called
  // `__proto__` or `constructor`), passed to the API URL-encoded.
  const rows = queues.length
    ? queues.map((q) =>
        el(
          'tr',
          { 'data-queue': q.name },
          el('td', {}, q.name, q.paused ? el('span', { class: 'paused' }, ' paused') : ''),
          el('td', { class: 'num' }, number(q.waiting)),
          el('td', { class: 'num' }, number(q.pending)),
          el('td', { class: 'num' }, number(q.running)),
          el('td', {}, limitsText(q)),
          el(
            'td',
            {},
            el(
              'button',
              { type: 'button', class: 'queue-toggle', 'data-name': q.name, 'data-paused': String(q.paused) },
              q.paused ? 'Resume' : 'Pause',
            ),
          ),
        ),
      )
    : [el('tr', {}, el('td', { colspan: '6', class: 'muted' }, 'No waiting, pending or running jobs.'))];
  const html = rows.map((row) => row.outerHTML).join('');
  if (body.dataset.html !== html) {
    body.replaceChildren(...rows);
    body.dataset.html = html;
  }
}

function renderSchedules({ schedules }) {
  const body = $('schedules');
  // Schedule names are data: shown as text nodes, passed to the API URL-encoded.
  const rows = schedules.length
    ? schedules.map((s) =>
        el(
          'tr',
          { 'data-schedule': s.name },
          el('td', {}, s.name),
          el('td', {}, el('code', {}, s.cron), s.tz === 'UTC' ? '' : ` ${s.tz}`),
          el('td', {}, s.task),
          el('td', {}, s.paused ? 'paused' : relative(s.nextRunAt)),
          el('td', {}, relative(s.lastRunAt)),
          el('td', {}, s.lastJobId ?? '—'),
          el(
            'td',
            {},
            el(
              'button',
              {
                type: 'button',
                class: 'schedule-toggle',
                'data-name': s.name,
                'data-paused': String(s.paused),
              },
              s.paused ? 'Resume' : 'Pause',
            ),
          ),
        ),
      )
    : [el('tr', {}, el('td', { colspan: '7', class: 'muted' }, 'No schedules.'))];
  const html = rows.map((row) => row.outerHTML).join('');
  if (body.dataset.html !== html) {
    body.replaceChildren(...rows);
    body.dataset.html = html;
  }
}

// SPEC §11 the blocked sequences (head dead), each with its head job: a click opens the job,
// whose detail offers requeue (runs it again, first) and cancel (skips it).
function renderSequences({ sequences }) {
  const body = $('sequences');
  // Keys are data: shown as text nodes.
  const rows = sequences.length
    ? sequences.map((s) =>
        el(
          'tr',
          { 'data-sequence': s.key },
          el('td', {}, s.key),
          el(
            'td',
            {},
            el(
              'button',
              { type: 'button', class: 'link sequence-head', 'data-job': s.headId },
              `#${s.headId}`,
            ),
          ),
          el('td', {}, s.headStatus),
          el('td', {}, String(s.queued)),
        ),
      )
    : [el('tr', {}, el('td', { colspan: '4', class: 'muted' }, 'No blocked sequences.'))];
  const html = rows.map((row) => row.outerHTML).join('');
  if (body.dataset.html !== html) {
    body.replaceChildren(...rows);
    body.dataset.html = html;
  }
}

async function toggleQueue(button) {
  const name = button.dataset.name;
  const action = button.dataset.paused === 'true' ? 'resume' : 'pause';
  try {
    await api(`/queues/${encodeURIComponent(name)}/${action}`, { method: 'POST' });
    setText($('queue-message'), `${action === 'pause' ? 'Paused' : 'Resumed'} queue ${name}.`);
    await refresh();
  } catch (error) {
    setText($('queue-message'), error.message);
  }
}

async function toggleSchedule(button) {
  const name = button.dataset.name;
  const action = button.dataset.paused === 'true' ? 'resume' : 'pause';
  try {
    await api(`/schedules/${encodeURIComponent(name)}/${action}`, { method: 'POST' });
    setText($('schedule-message'), `${action === 'pause' ? 'Paused' : 'Resumed'} ${name}.`);
    await refresh();
  } catch (error) {
    setText($('schedule-message'), error.message);
  }
}

// ---------------------------------------------------------------- charts (hand-drawn SVG)

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function chartFrame(container, maxValue, spanMs = 3600000) {
  const width = container.clientWidth || 400;
  const height = container.clientHeight || 150;
  const pad = { left: 34, right: 8, top: 8, bottom: 18 };
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'none' });
  const plot = { x: pad.left, y: pad.top, w: width - pad.left - pad.right, h: height - pad.top - pad.bottom };
  root.append(
    svg('line', { class: 'axis', x1: plot.x, y1: plot.y + plot.h, x2: plot.x + plot.w, y2: plot.y + plot.h }),
  );
  root.append(svg('text', { x: 2, y: plot.y + 8 }, number(maxValue)));
  root.append(svg('text', { x: 2, y: plot.y + plot.h }, '0'));
  root.append(svg('text', { x: plot.x, y: height - 4 }, `−${Math.round(spanMs / 60000)} min`));
  root.append(svg('text', { x: plot.x + plot.w - 20, y: height - 4 }, 'now'));
  return { root, plot };
}

function renderDepth(samples) {
  const container = $('depth-chart');
  const now = Date.now();
  const max = Math.max(1, ...samples.map((s) => Math.max(s.waiting, s.pending, s.running)));
  // Samples exist only since the server started: span what there is (5 to 60 minutes).
  const span = Math.min(3600000, Math.max(300000, now - (samples[0]?.t ?? now)));
  const { root, plot } = chartFrame(container, max, span);
  const x = (t) => plot.x + plot.w * (1 - (now - t) / span);
  const y = (v) => plot.y + plot.h * (1 - v / max);
  if (samples.length < 2) {
    root.append(
      svg('text', { class: 'empty', x: plot.x + 10, y: plot.y + plot.h / 2 }, 'collecting samples…'),
    );
  } else {
    for (const key of ['waiting', 'pending', 'running']) {
      const points = samples.map((s) => `${x(s.t).toFixed(1)},${y(s[key]).toFixed(1)}`).join(' ');
      root.append(svg('polyline', { class: `${key}-line`, points }));
    }
  }
  swapChart(container, root, [
    ['waiting', 'var(--waiting)'],
    ['pending', 'var(--pending)'],
    ['running', 'var(--running)'],
  ]);
}

function renderThroughput(buckets) {
  const container = $('throughput-chart');
  const now = Date.now();
  const total = (b) => b.done + b.dead + b.cancelled;
  const max = Math.max(1, ...buckets.map(total));
  const { root, plot } = chartFrame(container, max);
  const barWidth = Math.max(1, plot.w / 60 - 1);
  if (buckets.length === 0) {
    root.append(
      svg(
        'text',
        { class: 'empty', x: plot.x + 10, y: plot.y + plot.h / 2 },
        'no finished jobs in the last hour',
      ),
    );
  }
  for (const bucket of buckets) {
    const left = plot.x + plot.w * (1 - (now - bucket.t) / 3600000);
    let base = plot.y + plot.h;
    for (const key of ['done', 'dead', 'cancelled']) {
      const h = (plot.h * bucket[key]) / max;
      if (h <= 0) continue;
      base -= h;
      const rect = svg('rect', {
        class: `bar-${key}`,
        x: left.toFixed(1),
        y: base.toFixed(1),
        width: barWidth.toFixed(1),
        height: h.toFixed(1),
      });
      rect.append(svg('title', {}, `${new Date(bucket.t).toLocaleTimeString()}: ${bucket[key]} ${key}`));
      root.append(rect);
    }
  }
  swapChart(container, root, [
    ['done', 'var(--done)'],
    ['dead', 'var(--dead)'],
    ['cancelled', 'var(--cancelled)'],
  ]);
}

function swapChart(container, root, legend) {
  const items = legend.map(([name, colour]) => {
    const swatch = el('i');
    swatch.style.background = colour;
    return el('span', {}, swatch, name);
  });
  container.replaceChildren(root, el('div', { class: 'legend' }, ...items));
}

// ---------------------------------------------------------------- job list (keyset pages)

function jobQuery() {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(state.filters)) if (value) params.set(key, value);
  if (state.after) params.set('after', state.after);
  params.set('limit', String(PAGE_SIZE));
  return `?${params}`;
}

function renderJobs(page) {
  const body = $('jobs');
  const existing = new Map([...body.children].map((row) => [row.dataset.id, row]));
  const rows = page.jobs.map((job) => {
    const key = `${job.status}|${job.attempts}|${job.updatedAt}|${job.lastError ?? ''}`;
    const current = existing.get(job.id);
    if (current && current.dataset.key === key) {
      setText(current.querySelector('.when'), relative(job.updatedAt));
      return current;
    }
    const open = el('button', { type: 'button', class: 'link', 'aria-label': `Open job ${job.id}` }, job.id);
    const row = el(
      'tr',
      { 'data-id': job.id, 'data-key': key, 'data-testid': `job-row-${job.id}` },
      el('td', {}, open),
      el('td', {}, statusBadge(job.status)),
      el('td', {}, job.task),
      el('td', {}, job.queue),
      el('td', { class: 'num' }, `${job.attempts}/${job.maxAttempts}`),
      el('td', { class: 'when' }, relative(job.updatedAt)),
      el('td', { class: 'error', title: job.lastError ?? '' }, (job.lastError ?? '').split('\n')[0]),
    );
    row.addEventListener('click', () => void openJob(job.id));
    open.addEventListener('click', (event) => {
      event.stopPropagation();
      void openJob(job.id);
    });
    return row;
  });
  // Patch in place: keep rows that did not change (and the focus inside them).
  rows.forEach((row, i) => {
    if (body.children[i] !== row) body.insertBefore(row, body.children[i] ?? null);
  });
  while (body.children.length > rows.length) body.lastElementChild.remove();
  $('jobs-empty').hidden = rows.length > 0;
  // A page is a bounded read: with fewer jobs than asked and a `next`, the server stopped
  // looking at that id (older jobs may still match); "Older" looks further back from there.
  const partial = page.next !== null && page.jobs.length < PAGE_SIZE;
  setText(
    $('jobs-scanned'),
    partial ? `Looked through jobs down to #${page.next}; older ones may match.` : '',
  );
  $('jobs-scanned').hidden = !partial;
  state.next = page.next;
  $('page-older').disabled = !page.next;
  $('page-newest').disabled = !state.after;
}

// ---------------------------------------------------------------- job detail

/**
 * Shows job `id` in the dialog once it has loaded. `data-loading` names the job while it loads.
 * A job whose dialog was closed, or that another job replaced, while it loaded is not shown: a
 * dialog the user closed stays closed.
 */
async function openJob(id) {
  const dialog = $('detail');
  state.openJob = id;
  dialog.dataset.loading = id;
  setText($('action-message'), '');
  try {
    const job = await api(`/jobs/${encodeURIComponent(id)}`);
    if (state.openJob !== id) return;
    renderDetail(job);
    if (!dialog.open) dialog.showModal();
  } catch (error) {
    report(error);
  } finally {
    if (dialog.dataset.loading === id) delete dialog.dataset.loading;
  }
}

/**
 * The dialog closed (Escape, its ✕ button, a route): no job is open any more, and the address
 * names the page underneath again. Called from a MutationObserver on `open`, that is in the task
 * that closed the dialog; the `close` event comes a task later, when a keystroke or click that
 * came after the closing may already have run (and the address could still name the job).
 */
function detailClosed() {
  state.openJob = null;
  if (JOB_ROUTE.test(location.hash)) {
    const page = state.flow ? `#/flows/${encodeURIComponent(state.flow.id)}` : '#/';
    history.replaceState(null, '', page);
  }
}

function renderDetail(job) {
  setText($('detail-title'), `Job ${job.id} · ${job.task}`);
  const row = (name, value) => [el('dt', {}, name), el('dd', {}, value)];
  const time = (iso) => (iso ? `${new Date(iso).toLocaleString()} (${relative(iso)})` : '—');
  const dl = el(
    'dl',
    {},
    ...row('status', statusBadge(job.status)),
    ...row('queue', job.queue),
    ...row('priority', String(job.priority)),
    ...row('attempts', `${job.attempts} of ${job.maxAttempts}`),
    ...row('dedupe key', job.dedupeKey ?? '—'),
    ...row('group', job.group ?? '—'),
    ...row('flow', flowLink(job)),
    ...row(
      'depends on',
      jobLinks(job.dependsOn, job.dependsOnCount, job.dependsOnCountExact, 'detail-depends-on'),
    ),
    ...row(
      'dependents',
      jobLinks(job.dependents, job.dependentsCount, job.dependentsCountExact, 'detail-dependents'),
    ),
    ...row('run after', time(job.runAfter)),
    ...row('worker', job.workerId ?? '—'),
    ...row('lease until', time(job.leaseUntil)),
    ...row('started', time(job.runStartedAt)),
    ...row('timeout', job.timeoutMs ? `${job.timeoutMs} ms` : '—'),
    ...row('created', time(job.createdAt)),
    ...row('updated', time(job.updatedAt)),
  );
  const block = (title, text, testid) => [el('h3', {}, title), el('pre', { 'data-testid': testid }, text)];
  $('detail-body').replaceChildren(
    dl,
    ...block('Payload', JSON.stringify(job.payload, null, 2), 'detail-payload'),
    ...block('Result', job.result === null ? '—' : JSON.stringify(job.result, null, 2), 'detail-result'),
    ...block(
      'Progress',
      job.progress === null || job.progress === undefined ? '—' : JSON.stringify(job.progress, null, 2),
      'detail-progress',
    ),
    ...block('Last error', job.lastError ?? '—', 'detail-error'),
    el('h3', {}, 'Steps'),
    stepTable(job.steps ?? []),
  );
  $('detail').dataset.status = job.status;
  state.openDependents = job.dependentsCount ?? job.dependents?.length ?? 0;
  $('action-requeue').hidden = job.status !== 'dead';
  $('action-cancel').hidden = !['waiting', 'pending', 'running'].includes(job.status);
}

/** Longest value preview of a step in the job dialog. */
const STEP_PREVIEW = 80;

/**
 * SPEC §12 the job's durable steps: name, kind, when, a preview of the value — and, for a
 * suspended job, what it waits for (an event, until its timeout; a sleep's instant).
 */
function stepTable(steps) {
  if (steps.length === 0) return el('p', { 'data-testid': 'detail-steps' }, '—');
  const now = Date.now();
  const rows = steps.map((step) => {
    let value;
    if (step.pending) {
      value = `waiting for event ${JSON.stringify(step.event)}${step.wakeAt ? ` until ${new Date(step.wakeAt).toLocaleString()}` : ''}`;
    } else if (step.kind === 'sleep' && step.wakeAt && Date.parse(step.wakeAt) > now) {
      value = `sleeping until ${new Date(step.wakeAt).toLocaleString()}`;
    } else {
      const text = JSON.stringify(step.value) ?? 'null';
      value = text.length > STEP_PREVIEW ? `${text.slice(0, STEP_PREVIEW - 1)}…` : text;
    }
    return el(
      'tr',
      { 'data-step': step.name },
      el('td', {}, step.name),
      el('td', {}, step.kind),
      el('td', {}, `${new Date(step.completedAt).toLocaleString()} (${relative(step.completedAt)})`),
      el('td', {}, el('code', {}, value)),
    );
  });
  return el(
    'table',
    { class: 'steps', 'data-testid': 'detail-steps' },
    el(
      'thead',
      {},
      el('tr', {}, el('th', {}, 'name'), el('th', {}, 'kind'), el('th', {}, 'when'), el('th', {}, 'value')),
    ),
    el('tbody', {}, ...rows),
  );
}

/** SPEC §10 the job's flow, as a link to the flow page ("merge in 0b6a…"), or a dash. */
function flowLink(job) {
  if (!job.flowId) return '—';
  const text = job.flowRef === null ? job.flowId : `${job.flowRef} in ${job.flowId}`;
  return el(
    'span',
    { class: 'detail-links' },
    el('a', { href: `#/flows/${encodeURIComponent(job.flowId)}`, 'data-testid': 'detail-flow' }, text),
  );
}

/**
 * Links to jobs by id (the first JOB_LINKS of them), then "and N more" for the rest of `total`
 * (the API sends the first 100 ids and the count; "over N" when the count stopped at its
 * bound), or a dash.
 */
const JOB_LINKS = 50;
function jobLinks(ids, total, exact, testid) {
  if (!ids || ids.length === 0) return '—';
  const links = [];
  for (const id of ids.slice(0, JOB_LINKS)) {
    if (links.length) links.push(', ');
    links.push(el('a', { href: `#/jobs/${encodeURIComponent(id)}` }, `#${id}`));
  }
  const shown = Math.min(ids.length, JOB_LINKS);
  const rest = Math.max(total ?? ids.length, ids.length) - shown;
  if (rest > 0 || exact === false)
    links.push(el('span', { class: 'more' }, ` and ${exact === false ? 'over ' : ''}${number(rest)} more`));
  return el('span', { class: 'detail-links', 'data-testid': testid }, ...links);
}

function confirmAction(text) {
  const dialog = $('confirm');
  setText($('confirm-text'), text);
  dialog.returnValue = '';
  dialog.showModal();
  $('confirm-ok').focus();
  return new Promise((resolve) =>
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true }),
  );
}

async function act(action) {
  const id = state.openJob;
  const verb = action === 'requeue' ? 'Requeue' : 'Cancel';
  const text =
    action === 'requeue'
      ? `Requeue job ${id}? It goes back to pending with its attempts reset.`
      : `Cancel job ${id}? A running job is aborted by its worker.${
          state.openDependents > 0 ? ' The jobs waiting for it are cancelled with it.' : ''
        }`;
  if (!(await confirmAction(text))) return;
  try {
    await api(`/jobs/${encodeURIComponent(id)}/${action}`, { method: 'POST' });
    setText($('action-message'), `${verb}: done.`);
    const job = await api(`/jobs/${encodeURIComponent(id)}`);
    if (state.openJob === id) renderDetail(job);
    await refresh();
  } catch (error) {
    setText($('action-message'), error.message);
  }
}

// ---------------------------------------------------------------- flow page (SPEC §10)

/** Drawn nodes per layer and layers drawn: a 10,000-job fan-out draws 40 and a "+9,960 more" box. */
const FLOW_LAYER_NODES = 40;
const FLOW_LAYERS = 60;
/** A flow larger than this is fetched again every FLOW_LARGE_REFRESH_MS, not every refresh. */
const FLOW_LARGE = 1000;
const FLOW_LARGE_REFRESH_MS = 15000;
const NODE = { w: 190, h: 44, col: 260, row: 58, pad: 24, top: 34 };
/** Which jobs of a capped layer are drawn first: the ones an operator looks for. */
const STATUS_RANK = { dead: 0, running: 1, pending: 2, waiting: 3, cancelled: 4, done: 5 };
const byNumber = (a, b) => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);

/**
 * A layered layout: each job in the layer after its deepest dependency in the flow (longest
 * path, Kahn's order), each layer ordered by the mean position of its jobs' dependencies (fewer
 * crossings), then capped at FLOW_LAYER_NODES drawn jobs; the rest of a layer become one "more"
 * node with their counts by status. Edges out of the flow are listed apart.
 */
function layoutFlow(graph) {
  const jobs = graph.jobs;
  const index = new Map(jobs.map((job, i) => [job.id, i]));
  const deps = jobs.map(() => []);
  const dependents = jobs.map(() => []);
  const external = [];
  for (const edge of graph.edges) {
    const j = index.get(edge.job);
    const d = index.get(edge.dependsOn);
    if (j === undefined) continue;
    if (d === undefined) external.push(edge);
    else {
      deps[j].push(d);
      dependents[d].push(j);
    }
  }
  const left = deps.map((list) => list.length);
  const layer = new Array(jobs.length).fill(-1);
  const ready = [];
  left.forEach((n, i) => {
    if (n === 0) {
      layer[i] = 0;
      ready.push(i);
    }
  });
  for (let r = 0; r < ready.length; r++) {
    const i = ready[r];
    for (const j of dependents[i]) {
      layer[j] = Math.max(layer[j], layer[i] + 1);
      if (--left[j] === 0) ready.push(j);
    }
  }
  let depth = 0;
  for (const i of ready) depth = Math.max(depth, layer[i] + 1);
  const layers = Array.from({ length: depth }, () => []);
  const stuck = [];
  jobs.forEach((_, i) => {
    if (left[i] === 0) layers[layer[i]].push(i);
    else stuck.push(i);
  });
  if (stuck.length) layers.push(stuck); // a cycle cannot be enqueued; shown rather than lost
  // Order each layer by where its jobs' dependencies sit, then cap it.
  const position = new Array(jobs.length).fill(0);
  const drawn = [];
  for (const [l, members] of layers.slice(0, FLOW_LAYERS).entries()) {
    const key = (i) =>
      deps[i].length ? deps[i].reduce((sum, d) => sum + position[d], 0) / deps[i].length : 0;
    const keys = new Map(members.map((i) => [i, key(i)]));
    members.sort((a, b) => keys.get(a) - keys.get(b) || byNumber(jobs[a].id, jobs[b].id));
    members.forEach((i, p) => {
      position[i] = p;
    });
    let shown = members;
    let hidden = [];
    if (members.length > FLOW_LAYER_NODES) {
      const rank = (i) => STATUS_RANK[jobs[i].status] ?? 9;
      const picked = new Set(
        [...members]
          .sort((a, b) => rank(a) - rank(b) || position[a] - position[b])
          .slice(0, FLOW_LAYER_NODES),
      );
      shown = members.filter((i) => picked.has(i));
      hidden = members.filter((i) => !picked.has(i));
    }
    drawn.push({ layer: l, size: members.length, shown, hidden });
  }
  const notDrawn = layers.slice(FLOW_LAYERS).reduce((n, members) => n + members.length, 0);
  return { jobs, layers: drawn, deps, external, notDrawn, depth: layers.length };
}

function clip(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function countsByStatus(jobs) {
  const counts = new Map();
  for (const job of jobs) counts.set(job.status, (counts.get(job.status) ?? 0) + 1);
  return STATUSES.filter((s) => counts.has(s)).map((s) => [s, counts.get(s)]);
}

function renderFlow(graph) {
  const layout = layoutFlow(graph);
  const { jobs } = layout;
  setText($('flow-id'), graph.flowId);
  const summary = $('flow-summary');
  summary.replaceChildren(
    `${number(jobs.length)} job${jobs.length === 1 ? '' : 's'} in ${number(layout.depth)} layer${layout.depth === 1 ? '' : 's'}: `,
    ...countsByStatus(jobs).flatMap(([status, n], i) => [
      i ? ', ' : '',
      `${number(n)} `,
      statusBadge(status),
    ]),
  );
  const capped = layout.layers.some((l) => l.hidden.length);
  const notes = [];
  if (capped)
    notes.push(
      `Layers with more than ${FLOW_LAYER_NODES} jobs show ${FLOW_LAYER_NODES} (dead and running first) and a box for the rest.`,
    );
  if (layout.notDrawn)
    notes.push(`${number(layout.notDrawn)} jobs in layers past ${FLOW_LAYERS} are not drawn.`);
  if (graph.truncated)
    notes.push(`The flow has more than ${number(jobs.length)} jobs: the newest are not shown.`);
  if (notes.length) notes.push('skiplock flow ID lists every job.');
  if (jobs.length > FLOW_LARGE)
    notes.push(`A flow this large is refreshed every ${FLOW_LARGE_REFRESH_MS / 1000} s.`);
  setText($('flow-note'), notes.join(' '));
  $('flow-note').hidden = notes.length === 0;

  // Positions: a column per layer; a layer's "more" box under its drawn jobs.
  const at = new Map();
  const more = [];
  let rows = 1;
  for (const l of layout.layers) {
    const x = NODE.pad + l.layer * NODE.col;
    l.shown.forEach((i, r) => {
      at.set(i, { x, y: NODE.top + r * NODE.row });
    });
    if (l.hidden.length) {
      const box = { x, y: NODE.top + l.shown.length * NODE.row, layer: l };
      more.push(box);
      for (const i of l.hidden) at.set(i, box);
    }
    rows = Math.max(rows, l.shown.length + (l.hidden.length ? 1 : 0));
  }
  const width = NODE.pad * 2 + Math.max(1, layout.layers.length) * NODE.col - (NODE.col - NODE.w);
  const height = NODE.top + rows * NODE.row + NODE.pad;
  const root = svg('svg', {
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': `Flow of ${jobs.length} jobs`,
    'data-testid': 'flow-svg',
  });
  const marker = svg('marker', {
    id: 'flow-arrow',
    viewBox: '0 0 10 10',
    refX: 10,
    refY: 5,
    markerWidth: 7,
    markerHeight: 7,
    orient: 'auto-start-reverse',
  });
  marker.append(svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrowhead' }));
  const defs = svg('defs');
  defs.append(marker);
  root.append(defs);
  for (const l of layout.layers) {
    root.append(
      svg(
        'text',
        { class: 'layer-label', x: NODE.pad + l.layer * NODE.col, y: 20 },
        `layer ${l.layer} · ${number(l.size)}`,
      ),
    );
  }
  // Edges first (under the nodes), one per pair of drawn boxes.
  const edges = svg('g', { class: 'edges' });
  const seen = new Set();
  layout.deps.forEach((list, j) => {
    const to = at.get(j);
    if (!to) return;
    for (const d of list) {
      const from = at.get(d);
      if (!from || from === to) continue;
      const key = `${from.x},${from.y}>${to.x},${to.y}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const x1 = from.x + NODE.w;
      const y1 = from.y + NODE.h / 2;
      const x2 = to.x - 2;
      const y2 = to.y + NODE.h / 2;
      const bend = Math.max(30, (x2 - x1) / 2);
      edges.append(
        svg('path', {
          class: 'edge',
          d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`,
          'marker-end': 'url(#flow-arrow)',
        }),
      );
    }
  });
  root.append(edges);
  for (const l of layout.layers) {
    for (const i of l.shown) root.append(flowNode(jobs[i], at.get(i)));
  }
  for (const box of more) root.append(moreNode(box, jobs));
  const container = $('flow-graph');
  container.replaceChildren(root);

  const external = $('flow-external');
  if (layout.external.length) {
    const links = [];
    for (const edge of layout.external.slice(0, JOB_LINKS)) {
      if (links.length) links.push(', ');
      links.push(el('a', { href: `#/jobs/${encodeURIComponent(edge.dependsOn)}` }, `#${edge.dependsOn}`));
      links.push(` (for #${edge.job})`);
    }
    if (layout.external.length > JOB_LINKS)
      links.push(` +${number(layout.external.length - JOB_LINKS)} more`);
    external.replaceChildren('Depends on jobs outside this flow: ', ...links);
  }
  external.hidden = layout.external.length === 0;
}

/** One job: a link to its page, coloured by status; ref (or #id) and task as text nodes. */
function flowNode(job, { x, y }) {
  const name = job.flowRef ?? `#${job.id}`;
  const node = svg('a', {
    href: `#/jobs/${encodeURIComponent(job.id)}`,
    class: `node ${job.status}`,
    'data-id': job.id,
    'data-status': job.status,
    'data-testid': `flow-node-${job.id}`,
    'aria-label': `Job ${job.id} ${name}: ${job.task}, ${job.status}`,
  });
  node.append(
    svg('title', {}, `${name} · job ${job.id} · ${job.task} · ${job.status}`),
    svg('rect', { x, y, width: NODE.w, height: NODE.h, rx: 6 }),
    svg('text', { class: 'ref', x: x + 10, y: y + 18 }, clip(name, 26)),
    svg('text', { class: 'task', x: x + 10, y: y + 34 }, clip(`${job.task} · ${job.status}`, 30)),
  );
  return node;
}

/** The rest of a capped layer: how many, by status. */
function moreNode({ x, y, layer }, jobs) {
  const counts = countsByStatus(layer.hidden.map((i) => jobs[i]));
  const node = svg('g', { class: 'node more', 'data-testid': `flow-more-${layer.layer}` });
  node.append(
    svg('title', {}, counts.map(([s, n]) => `${number(n)} ${s}`).join(', ')),
    svg('rect', { x, y, width: NODE.w, height: NODE.h, rx: 6 }),
    svg('text', { class: 'ref', x: x + 10, y: y + 18 }, `+${number(layer.hidden.length)} more`),
    svg(
      'text',
      { class: 'task', x: x + 10, y: y + 34 },
      clip(counts.map(([s, n]) => `${number(n)} ${s}`).join(' · '), 30),
    ),
  );
  return node;
}

async function refreshFlow(force = false) {
  const flow = state.flow;
  if (!force && flow.large && Date.now() - flow.at < FLOW_LARGE_REFRESH_MS) return;
  let graph;
  try {
    graph = await api(`/flows/${encodeURIComponent(flow.id)}`);
  } catch (error) {
    if (!(error instanceof ApiError) || (error.status !== 404 && error.status !== 400)) throw error;
    if (state.flow !== flow) return;
    setText($('flow-id'), flow.id);
    setText($('flow-summary'), error.message);
    $('flow-graph').replaceChildren();
    $('flow-note').hidden = true;
    $('flow-external').hidden = true;
    flow.key = null;
    $('flow-view').dataset.loaded = flow.id;
    return;
  }
  if (state.flow !== flow) return; // left the page meanwhile
  flow.at = Date.now();
  flow.large = graph.jobs.length > FLOW_LARGE;
  // Redrawn only when a job or an edge changed: the scroll position and focus stay.
  const key = `${graph.edges.length}|${graph.jobs.map((j) => `${j.id}:${j.status}`).join(',')}`;
  if (key !== flow.key) {
    flow.key = key;
    renderFlow(graph);
  }
  $('flow-view').dataset.loaded = flow.id;
}

// ---------------------------------------------------------------- routes: #/flows/ID, #/jobs/ID

const FLOW_ROUTE = /^#\/flows\/([^/]+)$/;
const JOB_ROUTE = /^#\/jobs\/([^/]+)$/;

/** The page for the address: the overview or a flow; a job route opens its dialog over either. */
function route() {
  const hash = location.hash;
  const job = JOB_ROUTE.exec(hash);
  if (job) {
    void openJob(decodeURIComponent(job[1]));
    return;
  }
  const flow = FLOW_ROUTE.exec(hash);
  const flowId = flow ? decodeURIComponent(flow[1]) : null;
  if ($('detail').open) $('detail').close();
  else detailClosed(); // a job still loading is not shown over this page
  if (flowId === (state.flow?.id ?? null)) return;
  state.flow = flowId === null ? null : { id: flowId, key: null, at: 0, large: false };
  $('overview').hidden = flowId !== null;
  $('flow-view').hidden = flowId === null;
  document.body.dataset.view = flowId === null ? 'overview' : 'flow';
  delete $('flow-view').dataset.loaded;
  if (flowId !== null) {
    $('flow-graph').replaceChildren();
    setText($('flow-summary'), 'loading…');
    window.scrollTo(0, 0);
    $('flow-heading').focus();
  }
  void refresh();
}

// ---------------------------------------------------------------- refresh loop

function report(error) {
  if (error instanceof ApiError && error.status === 401) {
    $('token-form').hidden = false;
    connection(false, 'token needed');
  } else {
    connection(false, error instanceof ApiError ? `error: ${error.message}` : 'server unreachable');
  }
}

async function refresh() {
  if (state.busy) {
    state.again = true; // a page switch must not wait for the next tick
    return;
  }
  state.busy = true;
  try {
    if (state.flow) await refreshFlow();
    else await refreshOverview();
    const id = state.openJob;
    if (id && $('detail').open) {
      const job = await api(`/jobs/${encodeURIComponent(id)}`);
      // Another job opened, or the dialog closed, while this one loaded: not shown.
      if (state.openJob === id && $('detail').open) renderDetail(job);
    }
    connection(true, 'live');
    setText($('updated'), `updated ${new Date().toLocaleTimeString()}`);
    document.body.dataset.loaded = 'true';
  } catch (error) {
    report(error);
  } finally {
    state.busy = false;
    if (state.again) {
      state.again = false;
      void refresh();
    }
  }
}

async function refreshOverview() {
  const [ops, queues, page, history, schedules, sequences] = await Promise.all([
    api('/ops'),
    api('/queues'),
    api(`/jobs${jobQuery()}`),
    api('/history'),
    api('/schedules'),
    api('/sequences?blocked=true&limit=100'),
  ]);
  renderOps(ops);
  renderQueues(queues);
  renderSchedules(schedules);
  renderSequences(sequences);
  renderJobs(page);
  renderDepth(history.depth);
  renderThroughput(history.throughput);
}

function schedule() {
  clearInterval(state.timer);
  if ($('auto-refresh').checked) state.timer = setInterval(refresh, REFRESH_MS);
}

function applyFilters(filters) {
  state.filters = filters;
  state.after = '';
  state.pages = [];
  $('filter-status').value = filters.status;
  $('filter-task').value = filters.task;
  $('filter-queue').value = filters.queue;
  return refresh();
}

// ---------------------------------------------------------------- wiring

$('filters').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = new FormData(event.currentTarget);
  void applyFilters({
    status: String(form.get('status') || ''),
    task: String(form.get('task') || '').trim(),
    queue: String(form.get('queue') || '').trim(),
  });
});
$('filters').addEventListener('reset', () =>
  setTimeout(() => applyFilters({ status: '', task: '', queue: '' })),
);
$('filter-status').addEventListener('change', () => $('filters').requestSubmit());
for (const button of document.querySelectorAll('.count')) {
  button.addEventListener(
    'click',
    () => void applyFilters({ ...state.filters, status: button.dataset.status }),
  );
}
$('page-older').addEventListener('click', () => {
  if (!state.next) return;
  state.pages.push(state.after);
  state.after = state.next;
  void refresh();
});
$('page-newest').addEventListener('click', () => {
  state.after = '';
  state.pages = [];
  void refresh();
});
$('queues').addEventListener('click', (event) => {
  const button = event.target.closest('.queue-toggle');
  if (button) void toggleQueue(button);
});
$('sequences').addEventListener('click', (event) => {
  const button = event.target.closest('button.sequence-head');
  if (button) void openJob(button.dataset.job);
});
$('schedules').addEventListener('click', (event) => {
  const button = event.target.closest('.schedule-toggle');
  if (button) void toggleSchedule(button);
});
$('action-requeue').addEventListener('click', () => void act('requeue'));
$('action-cancel').addEventListener('click', () => void act('cancel'));
new MutationObserver(() => {
  if (!$('detail').open) detailClosed();
}).observe($('detail'), { attributes: true, attributeFilter: ['open'] });
window.addEventListener('hashchange', route);
$('auto-refresh').addEventListener('change', schedule);
$('token-form').addEventListener('submit', (event) => {
  event.preventDefault();
  state.token = $('token-input').value.trim();
  sessionStorage.setItem('skiplock-token', state.token);
  $('token-form').hidden = true;
  void refresh();
});
document.addEventListener('visibilitychange', () => {
  if (!document.hidden) void refresh();
});

if (document.body.dataset.authRequired === 'true' && !state.token) $('token-form').hidden = false;
if (FLOW_ROUTE.test(location.hash)) route();
else {
  void refresh();
  if (JOB_ROUTE.test(location.hash)) route();
}
schedule();
