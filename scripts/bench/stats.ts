/** The order statistics the benchmarks print (nearest rank). */

/** The value at `fraction` (0.5: the median) of `sorted`, ascending; NaN when it is empty. */
export function percentile(sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return NaN;
  return (
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(fraction * sorted.length) - 1))] ?? NaN
  );
}
