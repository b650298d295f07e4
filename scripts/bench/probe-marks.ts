/** Mark codes of scripts/bench/probe.ts, shared with latency.ts (which must not load the probe). */
export const PROBE_MARKS = {
  batchIn: 0,
  batchOut: 1,
  getLinkIn: 2,
  getLinkOut: 3,
  setMacIn: 4,
  setMacOut: 5,
  neighIn: 6,
  neighOut: 7,
  writeIn: 8,
  writeOut: 9,
} as const;
