/**
 * scripts/bench/flooder.c, built on demand and run inside a test namespace:
 * MTU flips on the given devices as fast as it can for a bounded time.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

import { trackChild, waitForExit, type Netns } from './netns';

const root = join(__dirname, '..', '..', '..');
export const BENCH_BIN = join(root, 'build', 'bench');

/** Compiles scripts/bench/NAME.c into build/bench/NAME; returns its path. */
export function buildBenchTool(name: string): string {
  mkdirSync(BENCH_BIN, { recursive: true });
  const binary = join(BENCH_BIN, name);
  execFileSync('cc', ['-O2', '-Wall', '-o', binary, join(root, 'scripts', 'bench', `${name}.c`)]);
  return binary;
}

export interface Flood {
  /** What the flooder printed: "N changes in S s: R/s". */
  output(): string;
  /** Resolves true once it finished by itself within `timeoutMs`. */
  finished(timeoutMs: number): Promise<boolean>;
  stop(): Promise<void>;
}

export function startFlood(ns: Netns, ifindexes: readonly number[], seconds: number): Flood {
  const child = trackChild(
    spawn(
      'ip',
      [
        'netns',
        'exec',
        ns.name,
        buildBenchTool('flooder'),
        '1000000',
        String(seconds),
        ...ifindexes.map(String),
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    ),
  );
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  return {
    output: () => output,
    finished: (timeoutMs) => waitForExit(child, timeoutMs),
    stop: async () => {
      child.kill('SIGKILL');
      await waitForExit(child, 5000);
    },
  };
}
