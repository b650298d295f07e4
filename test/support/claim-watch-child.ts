/**
 * Child-process side of test/claim-watch.test.ts: `node claim-watch-child.js MODE NAME`, with
 * NAME a claim name of the test's own. One JSON object per line on stdout.
 *
 * Modes:
 *  - open: holds NAME and joins it, both watched, prints ready; the loop must end by itself.
 *  - throw: holds NAME with a listener that throws when a guard joins, and joins it; an
 *    uncaughtException handler records the error and closes the watches.
 *  - worker: a worker thread holds NAME with joined guards, then is terminated mid-watch.
 */
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

import { binding } from '../../lib/core/binding';

function print(value: object): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** Holds `name` and joins it `joins` times, every socket watched. */
function holdAndJoin(
  name: string,
  joins: number,
  onOthers: (others: number) => void,
): { close(): void }[] {
  const held = binding.claimName(name);
  const watches = [new binding.ClaimWatch(held.fd, held.held, onOthers)];
  for (let i = 0; i < joins; i += 1) {
    const joined = binding.claimName(name);
    watches.push(new binding.ClaimWatch(joined.fd, joined.held, () => undefined));
  }
  return watches;
}

function main(): void {
  const [mode, name] = process.argv.slice(2);
  if (name === undefined) throw new Error('usage: claim-watch-child MODE NAME');
  if (mode === 'open') {
    holdAndJoin(name, 1, () => undefined);
    print({ what: 'ready' });
  } else if (mode === 'throw') {
    const error = new Error('boom');
    let calls = 0;
    const watches = holdAndJoin(name, 1, () => {
      throw error;
    });
    // The watches keep nothing alive: this waits for the join to be heard.
    const waiting = setTimeout(() => print({ what: 'not heard' }), 10_000);
    process.on('uncaughtException', (caught) => {
      calls += 1;
      print({ what: 'uncaught', calls, same: caught === error, message: caught.message });
      for (const watch of watches) watch.close();
      clearTimeout(waiting);
    });
  } else if (mode === 'worker') {
    const worker = new Worker(__filename, { workerData: name });
    worker.on('message', (others: number) => {
      print({ what: 'others', others });
      if (others === 3) void worker.terminate().then(() => print({ what: 'terminated' }));
    });
  } else {
    throw new Error(`unknown mode ${String(mode)}`);
  }
}

if (isMainThread) {
  main();
} else {
  // Kept open on purpose: the worker's teardown must close them.
  holdAndJoin(workerData as string, 3, (others) => parentPort?.postMessage(others));
  setInterval(() => undefined, 1000);
}
