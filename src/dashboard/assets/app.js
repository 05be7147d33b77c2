// Skiplock dashboard: plain DOM, no framework, no CDN. Every refresh patches the page in place
// (rows keyed by job id, text nodes updated only when they change), so auto-refresh never
// flickers or steals focus.
const REFRESH_MS = 2000;
const PAGE_SIZE = 25;
const STATUSES = ['pending', 'running', 'done', 'dead', 'cancelled'];
const $ = (id) => document.getElementById(id);

const state = {
  token: sessionStorage.getItem('skiplock-token') || '',
  filters: { status: '', task: '', queue: '' },
  /** Keyset cursors of the pages before the current one; the current page starts after `after`. */
  pages: [],
  after: '',
  next: null,
  openJob: null,
  timer: null,
  busy: false,
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
  for (const [key, [text, alert]] of Object.entries(signals)) {
    const dd = document.querySelector(`[data-signal="${key}"]`);
    setText(dd, text);
    dd.classList.toggle('alert', alert);
  }
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
    : [el('tr', {}, el('td', { colspan: '5', class: 'muted' }, 'No pending or running jobs.'))];
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
  const max = Math.max(1, ...samples.map((s) => Math.max(s.pending, s.running)));
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
    for (const key of ['pending', 'running']) {
      const points = samples.map((s) => `${x(s.t).toFixed(1)},${y(s[key]).toFixed(1)}`).join(' ');
      root.append(svg('polyline', { class: `${key}-line`, points }));
    }
  }
  swapChart(container, root, [
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

async function openJob(id) {
  const dialog = $('detail');
  state.openJob = id;
  setText($('action-message'), '');
  try {
    renderDetail(await api(`/jobs/${encodeURIComponent(id)}`));
    if (!dialog.open) dialog.showModal();
  } catch (error) {
    report(error);
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
  );
  $('detail').dataset.status = job.status;
  $('action-requeue').hidden = job.status !== 'dead';
  $('action-cancel').hidden = job.status !== 'pending' && job.status !== 'running';
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
      : `Cancel job ${id}? A running job is aborted by its worker.`;
  if (!(await confirmAction(text))) return;
  try {
    await api(`/jobs/${encodeURIComponent(id)}/${action}`, { method: 'POST' });
    setText($('action-message'), `${verb}: done.`);
    renderDetail(await api(`/jobs/${encodeURIComponent(id)}`));
    await refresh();
  } catch (error) {
    setText($('action-message'), error.message);
  }
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
  if (state.busy) return;
  state.busy = true;
  try {
    const [ops, queues, page, history, schedules] = await Promise.all([
      api('/ops'),
      api('/queues'),
      api(`/jobs${jobQuery()}`),
      api('/history'),
      api('/schedules'),
    ]);
    renderOps(ops);
    renderQueues(queues);
    renderSchedules(schedules);
    renderJobs(page);
    renderDepth(history.depth);
    renderThroughput(history.throughput);
    if (state.openJob && $('detail').open)
      renderDetail(await api(`/jobs/${encodeURIComponent(state.openJob)}`));
    connection(true, 'live');
    setText($('updated'), `updated ${new Date().toLocaleTimeString()}`);
    document.body.dataset.loaded = 'true';
  } catch (error) {
    report(error);
  } finally {
    state.busy = false;
  }
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
$('schedules').addEventListener('click', (event) => {
  const button = event.target.closest('.schedule-toggle');
  if (button) void toggleSchedule(button);
});
$('action-requeue').addEventListener('click', () => void act('requeue'));
$('action-cancel').addEventListener('click', () => void act('cancel'));
$('detail').addEventListener('close', () => {
  state.openJob = null;
});
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
void refresh();
schedule();
