/**
 * `flannel-guard watch --json` run as a user runs it (the package's bin, in a
 * child process), with its JSON lines parsed into events to await.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

import { trackChild, waitForExit } from './netns';
import type { TestbedNode } from './testbed';

export const CLI = join(__dirname, '..', '..', 'lib', 'cli', 'main.js');

export interface GuardLine {
  event: string;
  [field: string]: unknown;
}

export class GuardProcess {
  readonly lines: GuardLine[] = [];
  stderr = '';
  readonly #child: ChildProcess;
  readonly #waiters = new Set<() => void>();

  private constructor(child: ChildProcess) {
    this.#child = child;
    let pending = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      pending += chunk;
      const parts = pending.split('\n');
      pending = parts.pop() ?? '';
      for (const part of parts) {
        if (part.trim() === '') continue;
        this.lines.push(JSON.parse(part) as GuardLine);
      }
      for (const wake of this.#waiters) wake();
    });
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
    });
    child.once('exit', () => {
      for (const wake of this.#waiters) wake();
    });
  }

  /** Starts `flannel-guard watch --json ARGS` (in `env`) and waits for its `ready` line. */
  static async start(
    args: readonly string[],
    timeoutMs = 10_000,
    env: NodeJS.ProcessEnv = process.env,
  ): Promise<GuardProcess> {
    // The bin itself, through its interpreter line, as `npx flannel-guard` runs it.
    const child = trackChild(
      spawn(CLI, ['watch', '--json', ...args], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env,
      }),
    );
    const guard = new GuardProcess(child);
    await guard.waitFor((line) => line.event === 'ready', timeoutMs);
    return guard;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  events(name: string): GuardLine[] {
    return this.lines.filter((line) => line.event === name);
  }

  /** The first line from index `from` on that satisfies `predicate`. */
  waitFor(predicate: (line: GuardLine) => boolean, timeoutMs = 5000, from = 0): Promise<GuardLine> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const found = this.lines.slice(from).find(predicate);
        if (found) {
          finish();
          resolve(found);
          return true;
        }
        if (this.#child.exitCode !== null || this.#child.signalCode !== null) {
          finish();
          reject(
            new Error(
              `flannel-guard exited (${this.#child.exitCode ?? this.#child.signalCode}): ${this.stderr}`,
            ),
          );
          return true;
        }
        return false;
      };
      const timer = setTimeout(() => {
        finish();
        reject(
          new Error(
            `no matching flannel-guard line within ${timeoutMs} ms; got:\n${this.lines.map((l) => JSON.stringify(l)).join('\n')}\n${this.stderr}`,
          ),
        );
      }, timeoutMs);
      const finish = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(wake);
      };
      const wake = (): void => {
        check();
      };
      this.#waiters.add(wake);
      check();
    });
  }

  /** Resolves with the exit code once it exits by itself (null: killed by a signal). */
  async exited(timeoutMs = 5000): Promise<number | null> {
    if (!(await waitForExit(this.#child, timeoutMs))) throw new Error('flannel-guard did not exit');
    return this.#child.exitCode;
  }

  /** Sends `signal` (SIGSTOP and SIGCONT: the guard held still while the world moves). */
  signal(signal: NodeJS.Signals): void {
    if (this.#child.exitCode === null) this.#child.kill(signal);
  }

  /** Sends `signal` and resolves with the exit code (null if it had to be killed). */
  async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 5000): Promise<number | null> {
    if (this.#child.exitCode !== null) return this.#child.exitCode;
    this.#child.kill(signal);
    if (await waitForExit(this.#child, timeoutMs)) return this.#child.exitCode;
    this.#child.kill('SIGKILL');
    await waitForExit(this.#child, timeoutMs);
    return null;
  }
}

/** `watch` for a test bed node against a cluster: its netns, its Node, metrics on loopback. */
export function startNodeGuard(
  node: Pick<TestbedNode, 'name' | 'ns' | 'udevRootFlags'>,
  kubeconfig: string,
  extra: readonly string[] = [],
): Promise<GuardProcess> {
  return GuardProcess.start(
    [
      '--netns',
      node.ns.name,
      '--kubeconfig',
      kubeconfig,
      '--node',
      node.name,
      '--metrics-address',
      '127.0.0.1:0',
      ...node.udevRootFlags(),
      ...extra,
    ],
    30_000,
  );
}
