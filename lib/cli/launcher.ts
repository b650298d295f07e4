/**
 * A guard run through npm (`npx flannel-guard`, `npm exec`, `npm start`) sits under npm and the
 * `sh -c` npm runs commands with. npm forwards SIGTERM and SIGINT to that shell only: SIGTERM
 * kills the shell and leaves the guard running, re-parented to PID 1; npm killed outright leaves
 * both. So a guard npm started follows the processes between it and npm: once one of them is
 * gone, it stops as on SIGTERM. (SIGINT sent to npm alone still reaches no one: the shell waits
 * for the guard. Ctrl-C in a terminal signals the whole process group, the guard included.)
 */
import { readFileSync } from 'node:fs';

export interface ProcessInfo {
  ppid: number;
  /** Start time in clock ticks since boot: a PID reused by another process has another. */
  start: string;
  comm: string;
}

/** A process as /proc/PID/stat describes it; null when there is no such process. */
export function readProcess(pid: number): ProcessInfo | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  return parseStat(stat);
}

/** `pid (comm) state ppid ...`: comm may hold spaces and parentheses; the last ')' ends it. */
export function parseStat(stat: string): ProcessInfo | null {
  const open = stat.indexOf('(');
  const close = stat.lastIndexOf(')');
  if (open < 0 || close < open) return null;
  // After comm: state(3) ppid(4) ... starttime(22), counted from 1.
  const fields = stat.slice(close + 2).split(' ');
  const ppid = Number(fields[1]);
  const start = fields[19];
  if (!Number.isInteger(ppid) || start === undefined) return null;
  return { ppid, start, comm: stat.slice(open + 1, close) };
}

export interface Launcher {
  pid: number;
  start: string;
}

/**
 * The processes from this one's parent up to npm, when npm started it (npm sets
 * `npm_command`; npm names its process "npm …"); none otherwise.
 */
export function npmLaunchers(
  env: NodeJS.ProcessEnv,
  parent: number,
  read: (pid: number) => ProcessInfo | null = readProcess,
): Launcher[] {
  if (env.npm_command === undefined) return [];
  const chain: Launcher[] = [];
  // npm, or the shell npm started and then npm: two steps; a third for a wrapper between.
  for (let pid = parent, depth = 0; depth < 3 && pid > 1; depth += 1) {
    const info = read(pid);
    if (info === null) return [];
    chain.push({ pid, start: info.start });
    if (info.comm === 'npm' || info.comm.startsWith('npm ')) return chain;
    pid = info.ppid;
  }
  return []; // npm is not where it should be: nothing to follow
}

/** Calls `onGone` once one of `launchers` has ended; returns a function that stops looking. */
export function followLaunchers(
  launchers: readonly Launcher[],
  onGone: () => void,
  read: (pid: number) => ProcessInfo | null = readProcess,
  intervalMs = 500,
): () => void {
  if (launchers.length === 0) return () => undefined;
  const timer = setInterval(() => {
    if (launchers.every(({ pid, start }) => read(pid)?.start === start)) return;
    clearInterval(timer);
    onGone();
  }, intervalMs);
  timer.unref();
  return () => {
    clearInterval(timer);
  };
}
