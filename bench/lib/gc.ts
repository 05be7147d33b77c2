/**
 * Garbage collection and JS heap allocation of one phase of a process, from V8's GCProfiler
 * (Node ≥ 20): every collection's type, cost and the heap's used size before and after it.
 * Allocated bytes = what the used heap grew by between collections (before each one, minus
 * after the previous one), plus the growth after the last: the JS heap only (not Buffers or
 * other external memory), exact up to objects allocated and freed by no collection.
 */
import v8 from 'node:v8';

export interface GcFigures {
  collections: number;
  /** Total cost of the collections, ms (GCProfiler's `cost`, µs, summed). */
  ms: number;
  /** Milliseconds per collection type (Scavenge, MarkSweepCompact, …). */
  byType: Record<string, number>;
  allocatedBytes: number;
}

interface GcStatistic {
  gcType: string;
  cost: number;
  beforeGC: { heapStatistics: { usedHeapSize: number } };
  afterGC: { heapStatistics: { usedHeapSize: number } };
}

export class GcMeter {
  private readonly profiler = new v8.GCProfiler();
  private readonly startUsed = v8.getHeapStatistics().used_heap_size;

  constructor() {
    this.profiler.start();
  }

  stop(): GcFigures {
    const endUsed = v8.getHeapStatistics().used_heap_size;
    const result = this.profiler.stop() as unknown as { statistics: GcStatistic[] } | undefined;
    const statistics = result?.statistics ?? [];
    let previous = this.startUsed;
    let allocated = 0;
    let costUs = 0;
    const byType: Record<string, number> = {};
    for (const gc of statistics) {
      allocated += Math.max(0, gc.beforeGC.heapStatistics.usedHeapSize - previous);
      previous = gc.afterGC.heapStatistics.usedHeapSize;
      costUs += gc.cost;
      byType[gc.gcType] = (byType[gc.gcType] ?? 0) + gc.cost / 1000;
    }
    allocated += Math.max(0, endUsed - previous);
    return { collections: statistics.length, ms: costUs / 1000, byType, allocatedBytes: allocated };
  }
}
