/**
 * Preloaded into `flannel-guard watch` by `latency.js --breakdown`
 * (`node -r dist/scripts/bench/probe.js dist/lib/cli/main.js watch ...`): time-stamps,
 * with CLOCK_MONOTONIC (process.hrtime, the rewriter's clock), every monitor
 * batch delivered into JavaScript, every request the guard makes on its
 * request socket and every line it writes to stdout. The marks are written to
 * $FG_PROBE_OUT when the process exits. Nothing in lib/ is changed: the probe
 * swaps the module's `binding` export for a wrapper before the CLI loads it.
 *
 * Cost: two hrtime reads per wrapped call (well under a microsecond each).
 */
import { writeFileSync } from 'node:fs';

import * as bindingModule from '../../lib/core/binding';
import type {
  RawBinding,
  RawControl,
  RawMonitor,
  RawMonitorItem,
  RawMonitorOptions,
  RawNetnsOptions,
} from '../../lib/core/binding';
import { PROBE_MARKS } from './probe-marks';

const CAPACITY = 4_000_000;
const times = new Float64Array(CAPACITY);
const codes = new Uint8Array(CAPACITY);
const extras = new Int32Array(CAPACITY);
let count = 0;

function mark(code: number, extra = 0): void {
  if (count >= CAPACITY) return;
  times[count] = Number(process.hrtime.bigint());
  codes[count] = code;
  extras[count] = extra;
  count += 1;
}

function timed<Args extends unknown[], Result>(
  inCode: number,
  outCode: number,
  call: (...args: Args) => Result,
): (...args: Args) => Result {
  return (...args: Args): Result => {
    mark(inCode);
    try {
      return call(...args);
    } finally {
      mark(outCode);
    }
  };
}

const original: RawBinding = bindingModule.binding;

function ProbedMonitor(
  options: RawMonitorOptions,
  onBatch: (batch: RawMonitorItem[]) => void,
): RawMonitor {
  return new original.Monitor(options, (batch) => {
    mark(PROBE_MARKS.batchIn, batch.length);
    try {
      onBatch(batch);
    } finally {
      mark(PROBE_MARKS.batchOut, batch.length);
    }
  });
}

function ProbedControl(options?: RawNetnsOptions): RawControl {
  const control = new original.Control(options);
  // The addon's methods are read-only on the prototype: shadow them on the instance.
  const wrap = (name: 'getLink' | 'setLinkAddress' | 'replaceNeighbour', inCode: number): void => {
    const method = control[name] as (...args: unknown[]) => unknown;
    Object.defineProperty(control, name, {
      value: timed(inCode, inCode + 1, (...args: unknown[]) => method.apply(control, args)),
    });
  };
  wrap('getLink', PROBE_MARKS.getLinkIn);
  wrap('setLinkAddress', PROBE_MARKS.setMacIn);
  wrap('replaceNeighbour', PROBE_MARKS.neighIn);
  return control;
}

const probed: RawBinding = {
  ...original,
  parseDatagram: (bytes) => original.parseDatagram(bytes),
  netnsInode: (path) => original.netnsInode(path),
  Monitor: ProbedMonitor as unknown as RawBinding['Monitor'],
  Control: ProbedControl as unknown as RawBinding['Control'],
};
Object.defineProperty(bindingModule, 'binding', { value: probed });

const stdoutWrite = process.stdout.write.bind(process.stdout);
process.stdout.write = timed(
  PROBE_MARKS.writeIn,
  PROBE_MARKS.writeOut,
  stdoutWrite,
) as typeof process.stdout.write;

process.on('exit', () => {
  const path = process.env.FG_PROBE_OUT;
  if (path === undefined) return;
  const lines: string[] = [];
  for (let i = 0; i < count; i += 1) {
    lines.push(`${codes[i] ?? 0} ${times[i] ?? 0} ${extras[i] ?? 0}`);
  }
  writeFileSync(path, lines.join('\n') + '\n');
});
