/**
 * Running a Node.js script (or any command) as a child process and keeping its exit status
 * exactly as the kernel reported it: exit code and signal separately, so that an abort
 * (SIGABRT) cannot be mistaken for an ordinary failure.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { trackChild } from './netns';

/** Absolute path of the compiled library (dist/lib/index.js). */
export const LIB_INDEX = join(__dirname, '..', '..', 'lib', 'index.js');
/** Absolute path of the compiled CLI (the package's bin). */
export const CLI_PATH = join(__dirname, '..', '..', 'lib', 'cli', 'main.js');
/** The node flags of the bin's interpreter line (`#!/usr/bin/env -S node FLAGS`), as `npx flannel-guard` runs it. */
export const CLI_NODE_FLAGS: readonly string[] = (() => {
  const first = readFileSync(CLI_PATH, 'utf8').split('\n', 1)[0] ?? '';
  const match = /^#!\/usr\/bin\/env -S node((?: --[a-z0-9-]+(?:=\S+)?)*)$/.exec(first);
  if (!match) throw new Error(`${CLI_PATH}: unexpected interpreter line ${first}`);
  return (match[1] ?? '').trim().split(' ').filter(Boolean);
})();
/** Absolute path of the compiled lifecycle child script. */
export const LIFECYCLE_CHILD = join(__dirname, 'lifecycle-child.js');

export interface ChildResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** True when we had to kill it because `timeoutMs` elapsed. */
  timedOut: boolean;
  /** Milliseconds from spawn to exit. */
  elapsedMs: number;
}

export interface ChildOptions {
  /** Kill (SIGKILL) after this many ms. Default 20 000. */
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/** A running child with captured output. */
export class RunningChild {
  stdout = '';
  stderr = '';
  readonly started = Date.now();
  readonly exited: Promise<ChildResult>;
  #timedOut = false;
  readonly #waiters = new Set<() => void>();

  constructor(
    readonly child: ChildProcess,
    timeoutMs: number,
  ) {
    trackChild(child);
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      this.stdout += chunk;
      for (const wake of this.#waiters) wake();
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
      for (const wake of this.#waiters) wake();
    });
    child.on('error', () => {
      /* reported through 'close' */
    });
    const timer = setTimeout(() => {
      this.#timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    this.exited = new Promise((resolve) => {
      child.once('close', (code, signal) => {
        clearTimeout(timer);
        for (const wake of this.#waiters) wake();
        resolve({
          code,
          signal,
          stdout: this.stdout,
          stderr: this.stderr,
          timedOut: this.#timedOut,
          elapsedMs: Date.now() - this.started,
        });
      });
    });
  }

  get hasExited(): boolean {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /** Resolves once stdout contains a line satisfying `predicate`; rejects on exit or timeout. */
  waitForLine(predicate: (line: string) => boolean, timeoutMs = 10_000): Promise<string> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const found = this.stdout.split('\n').find((line) => line !== '' && predicate(line));
        if (found !== undefined) {
          finish();
          resolve(found);
          return;
        }
        if (this.hasExited) {
          finish();
          reject(
            new Error(`child exited before the line appeared:\n${this.stdout}\n${this.stderr}`),
          );
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(
          new Error(`no matching line within ${timeoutMs} ms:\n${this.stdout}\n${this.stderr}`),
        );
      }, timeoutMs);
      const finish = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
      check();
    });
  }

  /**
   * Resolves with the first JSON line of stdout, from the `from`th on, that
   * satisfies `predicate` (a line still being written is not read yet);
   * rejects on exit or timeout.
   */
  async waitForJson<T>(predicate: (line: T) => boolean, timeoutMs = 15_000, from = 0): Promise<T> {
    let found: T | undefined;
    await this.waitForLine(() => {
      found = jsonLines<T>(this.stdout.slice(0, this.stdout.lastIndexOf('\n') + 1))
        .slice(from)
        .find(predicate);
      return found !== undefined;
    }, timeoutMs);
    if (found === undefined) throw new Error('unreachable: waitForLine resolved without a match');
    return found;
  }

  /** Kills the child (if still running) and waits for it. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<ChildResult> {
    if (!this.hasExited) this.child.kill(signal);
    return this.exited;
  }
}

/** Starts `argv` (no shell) with stdout and stderr captured. */
export function startCommand(argv: readonly string[], options: ChildOptions = {}): RunningChild {
  const [command, ...args] = argv;
  if (command === undefined) throw new Error('startCommand: empty argv');
  const child = spawn(command, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: options.env ?? process.env,
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
  });
  return new RunningChild(child, options.timeoutMs ?? 20_000);
}

/** Runs `argv` to completion. */
export function runCommand(
  argv: readonly string[],
  options: ChildOptions = {},
): Promise<ChildResult> {
  return startCommand(argv, options).exited;
}

/** `ip netns exec NS` prefix. */
export function inNetns(netns: string): string[] {
  return ['ip', 'netns', 'exec', netns];
}

/** setpriv prefix that keeps root but removes `capability` (e.g. 'net_admin') for good. */
export function withoutCapability(capability: string): string[] {
  return ['setpriv', `--inh-caps=-${capability}`, `--bounding-set=-${capability}`, '--'];
}

/** The JSON lines of a child's stdout, parsed. */
export function jsonLines<T>(stdout: string): T[] {
  return stdout
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as T);
}
