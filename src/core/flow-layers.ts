/**
 * The layers of a flow (SPEC §10) for people: each job in the layer after its deepest
 * dependency in the flow (longest path from the jobs that depend on nothing in it), so every
 * edge points from an earlier layer to a later one. Pure: `skiplock flow` prints them; the
 * dashboard draws the same layering in app.js.
 */

/** The jobs and edges of a flow, as `queue.flowGraph` returns them (only ids are read). */
export interface LayerInput {
  jobs: readonly { id: string }[];
  edges: readonly { job: string; dependsOn: string }[];
}

/**
 * The ids of `graph`'s jobs by layer, each layer in ascending id order. Edges to jobs outside
 * the flow are ignored. A cycle cannot be enqueued; were one in the data, its jobs would go in
 * one last layer rather than be lost.
 */
export function flowLayers(graph: LayerInput): string[][] {
  const ids = graph.jobs.map((job) => job.id);
  const index = new Map(ids.map((id, i) => [id, i]));
  // The edges in the flow as index pairs, and how many dependencies each job waits for.
  const left = new Int32Array(ids.length);
  const from: number[] = [];
  const to: number[] = [];
  for (const { job, dependsOn } of graph.edges) {
    const j = index.get(job);
    const d = index.get(dependsOn);
    if (j === undefined || d === undefined) continue;
    from.push(d);
    to.push(j);
    left[j] = (left[j] ?? 0) + 1;
  }
  // Each job's dependents, as one flat list sliced by `start` (CSR): no array per job.
  const start = new Int32Array(ids.length + 1);
  for (const d of from) start[d + 1] = (start[d + 1] ?? 0) + 1;
  for (let i = 0; i < ids.length; i++) start[i + 1] = (start[i + 1] ?? 0) + (start[i] ?? 0);
  const fill = start.slice(0, ids.length);
  const dependents = new Int32Array(from.length);
  from.forEach((d, e) => {
    dependents[fill[d] ?? 0] = to[e] ?? 0;
    fill[d] = (fill[d] ?? 0) + 1;
  });
  // Kahn's order: a job is placed once its last dependency is, one past the deepest of them.
  const layer = new Int32Array(ids.length).fill(-1);
  const ready: number[] = [];
  left.forEach((n, i) => {
    if (n === 0) {
      ready.push(i);
      layer[i] = 0;
    }
  });
  let depth = ready.length > 0 ? 1 : 0;
  for (let r = 0; r < ready.length; r++) {
    const i = ready[r] as number;
    const next = (layer[i] ?? 0) + 1;
    for (let e = start[i] ?? 0; e < (start[i + 1] ?? 0); e++) {
      const j = dependents[e] ?? 0;
      layer[j] = Math.max(layer[j] ?? 0, next);
      left[j] = (left[j] ?? 0) - 1;
      if (left[j] === 0) {
        ready.push(j);
        depth = Math.max(depth, next + 1);
      }
    }
  }
  const layers: string[][] = Array.from({ length: depth }, () => []);
  const stuck: string[] = [];
  ids.forEach((id, i) => {
    const at = layer[i] ?? -1;
    if (at >= 0 && left[i] === 0) layers[at]?.push(id);
    else stuck.push(id);
  });
  if (stuck.length > 0) layers.push(stuck);
  return layers.map((list) => list.sort(byNumber));
}

/** Job ids (int8 as text) in ascending numeric order. */
export function byNumber(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}
