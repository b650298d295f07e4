/**
 * The wakeup floor: the CPU one wakeup for one datagram costs a process that does nothing with
 * it, C against Node.js (run with the CLI's own node flags), in one run, side by side. A sender
 * (scripts/bench/wakeup.c, pinned to CPU 1) sends one UDP datagram every --interval-us to
 * 127.0.0.1 inside a throw-away namespace; the receiver (pinned to CPU 0) blocks in recv() (C) or
 * has an empty 'message' listener (Node) and reports its process's CPU time from the first
 * datagram to the last.
 *
 * This is the part of "CPU per correction" (scripts/bench/latency.ts, scale.ts) that a guard
 * pays before it reads a byte: at one rewrite every 5 ms each correction is one such wakeup.
 * Prints figures and their ratio; asserts nothing. Needs root (the namespace).
 *
 * Usage: node dist/scripts/bench/wakeup-floor.js [--count N] [--interval-us US] [--runs R]
 */
import { once } from 'node:events';
import { createInterface } from 'node:readline';

import { buildBenchTool } from '../../test/support/flooder';
import { destroyAll, Netns } from '../../test/support/netns';
import { CLI_NODE_FLAGS } from '../../test/support/node-child';
import { distribution, fmt, ratio, table } from './latency';

interface FloorOptions {
  count: number;
  intervalUs: number;
  runs: number;
}

const PORT = 45_678;
const LIMITS: Record<keyof FloorOptions, [number, number]> = {
  count: [10, 100_000],
  intervalUs: [0, 1_000_000],
  runs: [1, 20],
};
const FLAGS: Record<string, keyof FloorOptions> = {
  '--count': 'count',
  '--interval-us': 'intervalUs',
  '--runs': 'runs',
};

function parseFloorOptions(argv: readonly string[]): FloorOptions {
  const options: FloorOptions = { count: 1000, intervalUs: 5000, runs: 3 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = FLAGS[argv[i] ?? ''];
    if (key === undefined) throw new Error(`unknown flag ${argv[i] ?? ''}`);
    const value = Number(argv[i + 1]);
    const [min, max] = LIMITS[key];
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new Error(`${argv[i] ?? ''}: a whole number in ${min}..${max}`);
    }
    options[key] = value;
  }
  return options;
}

/** The Node receiver: the same protocol as wakeup.c's -r. */
function nodeReceiver(count: number): string {
  return `const s = require('node:dgram').createSocket('udp4'); let n = 0, first;
s.on('message', () => {
  n += 1;
  if (n === 1) first = process.cpuUsage();
  if (n === ${count}) {
    const used = process.cpuUsage(first);
    console.log('cpu_ns ' + (used.user + used.system) * 1000 + ' datagrams ' + (n - 1));
    process.exit(0);
  }
});
s.bind(${PORT}, '127.0.0.1', () => console.log('ready'));
setTimeout(() => process.exit(1), 10_000 + ${count} * 20).unref();`;
}

/** Runs one receiver against the sender; CPU per wakeup in µs. */
async function measure(
  ns: Netns,
  tool: string,
  receiver: string[],
  options: FloorOptions,
): Promise<number> {
  const child = ns.spawn(['taskset', '-c', '0', ...receiver], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (!child.stdout) throw new Error('receiver: no stdout');
  const lines = createInterface({ input: child.stdout });
  let result = '';
  let sender: ReturnType<Netns['spawn']> | undefined;
  lines.on('line', (line) => {
    if (line === 'ready') {
      sender = ns.spawn(
        [
          'taskset',
          '-c',
          '1',
          tool,
          '-s',
          String(PORT),
          String(options.count),
          String(options.intervalUs),
        ],
        { stdio: ['ignore', 'ignore', 'inherit'] },
      );
    } else {
      result = line;
    }
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  if (sender && sender.exitCode === null) await once(sender, 'exit');
  const match = /^cpu_ns (\d+) datagrams (\d+)$/.exec(result);
  if (code !== 0 || !match) throw new Error(`receiver ${receiver[0] ?? ''}: exit ${String(code)}`);
  return Number(match[1]) / 1000 / Number(match[2]);
}

async function main(): Promise<void> {
  const options = parseFloorOptions(process.argv.slice(2));
  const tool = buildBenchTool('wakeup');
  const ns = await Netns.create('fgw');
  try {
    await ns.ip('link set lo up');
    const receivers: [string, string[]][] = [
      ['C (recv loop)', [tool, '-r', String(PORT), String(options.count)]],
      [
        `Node ${process.version} (${CLI_NODE_FLAGS.join(' ')})`,
        [process.execPath, ...CLI_NODE_FLAGS, '-e', nodeReceiver(options.count)],
      ],
    ];
    const figures = receivers.map((): number[] => []);
    for (let run = 0; run < options.runs; run += 1) {
      for (const [index, [, argv]] of receivers.entries()) {
        figures[index]?.push(await measure(ns, tool, argv, options));
      }
    }
    const medians = figures.map((values) => distribution(values).p50);
    const [c = NaN, node = NaN] = medians;
    process.stdout.write(
      `Wakeup floor: one UDP datagram every ${options.intervalUs} us, ${options.count} per run, ` +
        `${options.runs} runs each (alternating); receivers on CPU 0, sender on CPU 1.\n` +
        'CPU per wakeup, us (process CPU time from the first datagram to the last):\n',
    );
    process.stdout.write(
      `${table([
        ['receiver', 'median', 'runs', 'vs C'],
        ...receivers.map(([label], index) => [
          label,
          fmt(medians[index] ?? NaN),
          (figures[index] ?? []).map((value) => fmt(value)).join(' '),
          ratio(medians[index] ?? NaN, c),
        ]),
      ])}\n`,
    );
    process.stdout.write(
      `Node pays ${fmt(node - c)} us more than C per wakeup before its handler does anything.\n`,
    );
  } finally {
    await ns.destroy();
    await destroyAll();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
