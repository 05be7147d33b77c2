/**
 * The admin HTTP API (SPEC §5). Every input is validated before the database is touched: a
 * malformed id or filter is a 400 naming the field, an unknown job a 404, a transition that
 * does not apply a 409 (ERR_CONFLICT, the code the CLI exits 3 on); all errors share one
 * envelope `{ error: { code, message, field? } }`. Every read is bounded (SPEC §5, §7).
 */
import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { requireFlowId, requireInt, requireJobId, requireName, requireStatus } from '../core/validate.js';
import { NotFoundError, ValidationError } from '../errors.js';
import type { Queue } from '../queue.js';
import type { EnqueueResult, ListOptions, LiveStatus } from '../types.js';
import { enqueueError, enqueueRequest } from './enqueue-body.js';
import { errorBody } from './errors.js';
import type { History } from './history.js';
import type { AdminReads, ReadRoute } from './read-route.js';

const LIST_PARAMS = ['status', 'task', 'queue', 'limit', 'after'];
/** The query parameters of GET /api/sequences (SPEC §11). */
const SEQUENCE_PARAMS = ['blocked', 'limit', 'after'];
/** Schedules per page of GET /api/schedules. */
const SCHEDULE_PAGE = 500;
/** Most jobs of one flow `GET /api/flows/:id` returns (the oldest; `truncated` says there are more). */
const FLOW_GRAPH_LIMIT = 10_005;
/** Ids of dependencies and of dependents `GET /api/jobs/:id` returns (the lowest; the counts say how many). */
const DEPENDENCY_IDS = 100;
/** Largest body of `POST /api/jobs` by default (SPEC §13): 1 MiB. */
export const ENQUEUE_BODY_LIMIT = 1024 * 1024;

/**
 * The /api routes. `reads` serves every read that may come from the read replica (the queue
 * itself, or `route` when it has a replica); `queue` the writes and the primary's reads.
 * `enqueueBodyLimit`: the largest body of `POST /api/jobs`, in bytes.
 */
export function apiRoutes(
  queue: Queue,
  history: History,
  route: ReadRoute | null = null,
  enqueueBodyLimit = ENQUEUE_BODY_LIMIT,
): Hono {
  const api = new Hono();
  const reads: AdminReads = route ?? queue;

  // `replica` (issue 26): null without a read replica, else its status for this very read; while
  // it is not `up`, every read here comes from the primary (replicaLagMs is then null).
  api.get('/ops', async (c) => {
    if (route === null) return c.json({ ...(await queue.ops()), replica: null });
    const { value, replica } = await route.readReporting((q) => q.ops());
    return c.json({ ...value, replica });
  });

  api.get('/counts', async (c) => {
    const [counts, live] = await Promise.all([reads.counts(), reads.liveByQueue()]);
    // Queue names are data (SPEC §5): a Map, never keys of a plain object, so a queue named
    // `__proto__` cannot reach Object.prototype. Object.fromEntries defines own properties.
    const queues = new Map<string, Record<LiveStatus, number>>();
    for (const row of live) {
      const entry = queues.get(row.queue) ?? { waiting: 0, pending: 0, running: 0 };
      entry[row.status] = row.count;
      queues.set(row.queue, entry);
    }
    return c.json({ ...counts, queues: Object.fromEntries(queues) });
  });

  api.get('/history', async (c) => c.json(await history.snapshot()));

  api.get('/jobs', async (c) => {
    const query = c.req.query();
    // Keys from the raw query string: c.req.query() drops names such as `toString` or `__proto__`.
    for (const key of new URL(c.req.url).searchParams.keys()) {
      if (!LIST_PARAMS.includes(key)) {
        throw new ValidationError(key, `is not a filter (known: ${LIST_PARAMS.join(', ')})`);
      }
    }
    const options: ListOptions = {};
    if (query.status) options.status = requireStatus(query.status, 'status');
    if (query.task) options.task = requireName(query.task, 'task');
    if (query.queue) options.queue = requireName(query.queue, 'queue');
    if (query.after) options.after = requireJobId(query.after, 'after');
    if (query.limit !== undefined) {
      if (!/^\d+$/.test(query.limit))
        throw new ValidationError('limit', `must be an integer from 1 to 1000, got "${query.limit}"`);
      options.limit = requireInt(Number(query.limit), 'limit', 1, 1000);
    }
    // A bounded read (SPEC §5): `next` may come back with fewer jobs than asked for, where the
    // window of examined rows ended; following it looks further back.
    return c.json(await reads.listPage(options));
  });

  // The job, and (SPEC §10) the ids of its dependencies and dependents: the dashboard's links.
  // §5 bounded: the first DEPENDENCY_IDS on each side, and how many there are (`dependentsCount`,
  // exact up to 10,000), however large the flow.
  api.get('/jobs/:id', async (c) => {
    const id = requireJobId(c.req.param('id'), 'id');
    const [job, dependencies, steps] = await Promise.all([
      reads.get(id),
      reads.dependencySummary(id, { limit: DEPENDENCY_IDS }),
      // §12 its durable steps, from the primary (what a suspended job waits for is among them)
      queue.steps(id),
    ]);
    if (!job) throw new NotFoundError(`No job with id ${id}`);
    return c.json({ ...job, ...dependencies, steps });
  });

  // SPEC §10 a flow's jobs and edges; no job in it is a 404 (an unknown id, or every job deleted).
  api.get('/flows/:id', async (c) => {
    const flowId = requireFlowId(c.req.param('id'), 'id');
    // §7 bounded: a flow that grew past this is drawn from its oldest jobs (`truncated`)
    const graph = await reads.flowGraph(flowId, { limit: FLOW_GRAPH_LIMIT });
    if (graph.jobs.length === 0)
      throw new NotFoundError(`No flow with id ${flowId} (its jobs may have been deleted by retention)`);
    return c.json(graph);
  });

  // SPEC §13 the HTTP producer: `{ task, payload, ...options }` through queue.enqueue (its own
  // transaction: the job is committed when the answer comes), 201 { id, created } or 200 on a
  // dedupe hit; bad input a 400 naming the field. Only JSON (a cross-site form cannot send it
  // without a preflight), and at most `enqueueBodyLimit` bytes of it (413, read no further).
  api.post(
    '/jobs',
    bodyLimit({
      maxSize: enqueueBodyLimit,
      onError: (c) =>
        c.json(
          errorBody(
            'ERR_TOO_LARGE',
            `The request body is larger than ${enqueueBodyLimit} bytes: keep payloads small (store large data elsewhere and enqueue a reference to it)`,
          ),
          413,
        ),
    }),
    async (c) => {
      if (!/^application\/json\s*(?:;|$)/i.test(c.req.header('content-type') ?? '')) {
        return c.json(
          errorBody(
            'ERR_UNSUPPORTED_MEDIA_TYPE',
            'Send the job as JSON, with Content-Type: application/json',
          ),
          415,
        );
      }
      const text = await c.req.text();
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch (error) {
        throw new ValidationError('body', `must be JSON (${(error as Error).message})`);
      }
      const request = enqueueRequest(body);
      let result: EnqueueResult;
      try {
        result = await queue.enqueue(request.task as string, request.payload, request.options);
      } catch (error) {
        throw enqueueError(request, error);
      }
      return c.json(result, result.created ? 201 : 200);
    },
  );

  // Writes decide and report in one statement on the primary (never a replica read first): an
  // unknown job is a 404, a job whose status does not allow it a 409 ERR_CONFLICT.
  api.post('/jobs/:id/requeue', async (c) => {
    const { id } = await queue.requeueOrThrow(requireJobId(c.req.param('id'), 'id'));
    return c.json({ id, requeued: true });
  });

  api.post('/jobs/:id/cancel', async (c) => {
    const { id, wasRunning } = await queue.cancelOrThrow(requireJobId(c.req.param('id'), 'id'));
    return c.json({ id, cancelled: true, wasRunning });
  });

  // SPEC §12 emits event :name (a change: the token rules of §5). The body, when there is one,
  // is JSON `{ "payload": … }` (a missing payload is null). `set` false: it was already set
  // (a latch: nothing changed).
  api.post('/events/:name', bodyLimit({ maxSize: enqueueBodyLimit }), async (c) => {
    const name = c.req.param('name');
    const text = await c.req.text();
    let payload: unknown = null;
    if (text.trim() !== '') {
      if (!/^application\/json\s*(?:;|$)/i.test(c.req.header('content-type') ?? ''))
        return c.json(
          errorBody(
            'ERR_UNSUPPORTED_MEDIA_TYPE',
            'Send the event as JSON { "payload": … }, with Content-Type: application/json',
          ),
          415,
        );
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch (error) {
        throw new ValidationError('body', `must be JSON (${(error as Error).message})`);
      }
      if (typeof body !== 'object' || body === null || Array.isArray(body))
        throw new ValidationError('body', 'must be a JSON object { "payload": … }');
      for (const key of Object.keys(body))
        if (key !== 'payload') throw new ValidationError(key, 'is not a field of an event (known: payload)');
      payload = (body as { payload?: unknown }).payload ?? null;
    }
    const set = await queue.emitEvent(name, payload);
    return c.json({ name, set });
  });

  // SPEC §8 schedules: the list (names are data: an array, never object keys; a bounded page of
  // SCHEDULE_PAGE by name, `next` set when there may be more), pause and resume.
  api.get('/schedules', async (c) => {
    const after = c.req.query('after');
    const schedules = await reads.schedules({
      limit: SCHEDULE_PAGE,
      ...(after ? { after: requireName(after, 'after') } : {}),
    });
    return c.json({
      schedules,
      next: schedules.length === SCHEDULE_PAGE ? (schedules.at(-1)?.name ?? null) : null,
    });
  });

  api.post('/schedules/:name/pause', async (c) => {
    const name = requireName(c.req.param('name'), 'name');
    if (!(await queue.pauseSchedule(name)))
      throw new NotFoundError(`No schedule named ${JSON.stringify(name)}`);
    return c.json({ name, paused: true });
  });

  api.post('/schedules/:name/resume', async (c) => {
    const name = requireName(c.req.param('name'), 'name');
    if (!(await queue.resumeSchedule(name)))
      throw new NotFoundError(`No schedule named ${JSON.stringify(name)}`);
    return c.json({ name, paused: false });
  });

  // SPEC §11 sequence keys with their head and queue (keys are data: an array), key order, a
  // bounded page (`limit` up to 1000, default 100; `next` set on a full page); `blocked=true`
  // only keys whose head is dead — the dashboard's list of blocked sequences.
  api.get('/sequences', async (c) => {
    for (const key of new URL(c.req.url).searchParams.keys()) {
      if (!SEQUENCE_PARAMS.includes(key)) {
        throw new ValidationError(key, `is not a parameter (known: ${SEQUENCE_PARAMS.join(', ')})`);
      }
    }
    const query = c.req.query();
    if (query.blocked !== undefined && query.blocked !== 'true' && query.blocked !== 'false') {
      throw new ValidationError('blocked', `must be true or false, got ${JSON.stringify(query.blocked)}`);
    }
    let limit = 100;
    if (query.limit !== undefined) {
      if (!/^\d+$/.test(query.limit))
        throw new ValidationError('limit', `must be an integer from 1 to 1000, got "${query.limit}"`);
      limit = requireInt(Number(query.limit), 'limit', 1, 1000);
    }
    const sequences = await reads.sequences({
      blocked: query.blocked === 'true',
      limit,
      ...(query.after ? { after: requireName(query.after, 'after') } : {}),
    });
    return c.json({ sequences, next: sequences.length === limit ? (sequences.at(-1)?.key ?? null) : null });
  });

  // SPEC §8 queues: settings and live counts (names are data: an array), pause and resume.
  api.get('/queues', async (c) => c.json({ queues: await reads.queues() }));

  api.post('/queues/:name/pause', async (c) => {
    const name = requireName(c.req.param('name'), 'name');
    await queue.pauseQueue(name);
    return c.json({ name, paused: true });
  });

  api.post('/queues/:name/resume', async (c) => {
    const name = requireName(c.req.param('name'), 'name');
    await queue.resumeQueue(name);
    return c.json({ name, paused: false });
  });

  api.all('*', (c) => c.json(errorBody('ERR_NOT_FOUND', `No route ${c.req.method} ${c.req.path}`), 404));
  return api;
}
