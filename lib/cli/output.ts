/**
 * What `watch` writes: one line per event, readable or JSON (`--json`), through a sink that never
 * blocks the guard's event loop.
 */
import { fstatSync, write, writeSync } from 'node:fs';
import { constants } from 'node:os';

import { binding } from '../core/binding';
import { describeChecksumErrors, describeChecksumSenders, type FlannelGuardEvents } from '../guard';
import type { WatchServices } from './services';

export type GuardEventName = Exclude<keyof FlannelGuardEvents, 'close'>;

/** Every event `watch` prints. */
export const GUARD_EVENT_NAMES: readonly GuardEventName[] = [
  'ready',
  'rewrite',
  'restored',
  'adopted',
  'offload',
  'verdict',
  'checksumErrors',
  'checksumSenders',
  'contested',
  'resumed',
  'deferred',
  'released',
  'ignored',
  'shared',
  'overrun',
  'resync',
  'error',
];

function errorFields(error: Error): object {
  return { message: error.message, ...Object.fromEntries(Object.entries(error)) };
}

export function onOff(value: boolean | null | undefined): string {
  return value === null || value === undefined ? '?' : value ? 'on' : 'off';
}

const describers: { [Name in GuardEventName]: (payload: FlannelGuardEvents[Name][0]) => string } = {
  ready: (ready) => {
    const devices = ready.devices.map(
      (d) =>
        `${d.name} (ifindex ${d.ifindex}) mac ${d.mac ?? 'none'}` +
        (d.desiredMac
          ? ` desired ${d.desiredMac} [${d.macSource}${d.fromStateFile ? ', from the state file' : ''}]`
          : ' [not pinned]') +
        Object.entries(d.offloads)
          .map(([name, active]) => ` ${name}=${onOff(active)}`)
          .join(''),
    );
    const list = devices.length === 0 ? 'no managed device yet' : devices.join('; ');
    return `ready${ready.dryRun ? ' (dry run: nothing is written, no state is saved)' : ''}: ${list}`;
  },
  rewrite: (e) =>
    `rewrite: ${e.device} ${e.found === 'start' ? 'found at' : `${e.previous ?? 'none'} ->`} ${e.mac ?? 'none'} (expected ${e.expected})${e.dryRun ? ' [dry run: not corrected]' : ''} writer=${e.writer}: ${e.detail}`,
  adopted: (e) =>
    `adopted: ${e.device} keeps ${e.mac} (was published as ${e.previous}); ${e.neighbours} neighbour entries restored in ${e.latencyMs.toFixed(3)} ms`,
  restored: (e) =>
    `restored: ${e.device} mac ${e.mac} and ${e.neighbours} neighbour entries in ${e.latencyMs.toFixed(3)} ms${e.deferred ? ' (after backoff)' : ''}`,
  offload: (e) => {
    // A dry run says what the device has and what the policy would make of it.
    const states = Object.entries(e.active).map(([name, active]) =>
      e.dryRun && e.requested[name] !== undefined && e.requested[name] !== active
        ? `${name}=${onOff(active)} (would be set ${onOff(e.requested[name])})`
        : `${name}=${onOff(active)}`,
    );
    const side = e.sideEffects.map((s) => `${s.name} ${onOff(s.before)}->${onOff(s.after)}`);
    return `offload: ${e.device} ${states.join(' ')}${e.written || e.dryRun ? '' : ' (not written)'} [${e.reason}]${side.length > 0 ? `; also changed: ${side.join(', ')}` : ''}`;
  },
  verdict: (e) =>
    `verdict: ${e.device} ${e.feature} ${e.verdict}, ${e.action} (${e.rounds} rounds, ${e.probes} probes, ${e.msSinceStart.toFixed(0)} ms): ${e.detail}`,
  checksumErrors: (e) => `checksum errors: ${describeChecksumErrors(e)}`,
  checksumSenders: (e) => `checksum senders: ${describeChecksumSenders(e)}`,
  contested: (e) => `contested: ${e.detail}`,
  resumed: (e) => `resumed: ${e.device} ${e.what}${e.feature === undefined ? '' : ` ${e.feature}`}`,
  deferred: (e) =>
    `deferred: ${e.device} ${e.what}${e.feature === undefined ? '' : ` ${e.feature}`} corrected in ${Math.round(e.delayMs)} ms (rewritten past the burst: backing off)`,
  released: (e) => `released: ${e.device} (ifindex ${e.ifindex}) ${e.reason}`,
  ignored: (e) => `ignored: ${e.detail}`,
  shared: (e) => `shared: ${e.detail}${e.others > 1 ? ` (${e.others} others)` : ''}`,
  overrun: (e) => `overrun: netlink events lost (${e.cause}); re-reading the namespace`,
  resync: (e) =>
    e.phase === 'begin'
      ? `resync: begin (${e.reason ?? 'requested'})`
      : `resync: end${e.consistent === false ? ' (inconsistent)' : ''}`,
  error: (e) => `error: ${e.message}`,
};

/** One readable line for a guard event, as `watch` prints it without --json. */
export function describe<Name extends GuardEventName>(
  event: Name,
  payload: FlannelGuardEvents[Name][0],
): string {
  return describers[event](payload);
}

export type Level = 'info' | 'warn' | 'error';

const GUARD_LEVELS: Record<GuardEventName, Level> = {
  ready: 'info',
  rewrite: 'warn',
  restored: 'info',
  adopted: 'info',
  offload: 'info',
  verdict: 'info',
  checksumErrors: 'warn',
  checksumSenders: 'warn',
  contested: 'warn',
  resumed: 'info',
  deferred: 'info',
  released: 'info',
  ignored: 'warn',
  shared: 'warn',
  overrun: 'warn',
  resync: 'info',
  error: 'error',
};

const { errno } = constants;

/**
 * Where `watch` writes its lines: the lines of one callback (a rewrite and
 * its correction are two) go out in one write, so that each event costs the
 * guard one write, not one per line. Never blocking: a full stdout must not
 * stall the guard's event loop, and pending lines keep the process alive
 * until written.
 * - A regular file (a log file, kubelet's redirect) is written directly: it
 *   has no reader to wait for.
 * - A pipe or socket is written with RWF_NOWAIT (a write that fails with
 *   EAGAIN instead of waiting, whatever the shared file's O_NONBLOCK says);
 *   what does not fit, or everything where the kernel cannot do that, goes
 *   through the thread pool, whose round trip costs more than the write.
 * A closed stdout (`watch | head -1`) ends the output, never the guarding.
 */
class LineSink {
  #pending: string[] = [];
  #scheduled = false;
  #writing = false;
  #broken = false;
  readonly #direct: boolean;
  #noWait = true;

  constructor(readonly fd: number) {
    let regularFile = false;
    try {
      regularFile = fstatSync(fd).isFile();
    } catch {
      // Not open: the first write finds out.
    }
    this.#direct = regularFile;
  }

  write(line: string): boolean {
    if (this.#broken) return false;
    this.#pending.push(line);
    if (!this.#scheduled && !this.#writing) {
      this.#scheduled = true;
      queueMicrotask(() => {
        this.#scheduled = false;
        this.#flush();
      });
    }
    return true;
  }

  #flush(): void {
    if (this.#writing || this.#pending.length === 0) return;
    const buffer = Buffer.from(this.#pending.join(''));
    this.#pending = [];
    if (this.#direct) {
      try {
        for (let done = 0; done < buffer.length;) done += writeSync(this.fd, buffer, done);
      } catch {
        this.#broken = true; // the file is gone (EBADF) or the disk full: nothing more to say there
      }
      return;
    }
    let rest = buffer;
    if (this.#noWait) {
      const written = binding.writeNoWait(this.fd, buffer);
      if (written === buffer.length) return;
      if (written >= 0) {
        rest = buffer.subarray(written);
      } else if (written !== -errno.EAGAIN) {
        // Not possible here (EOPNOTSUPP): the thread pool from now on. Anything else
        // (EPIPE, EBADF) the thread pool's write reports as well.
        this.#noWait = written !== -errno.EOPNOTSUPP && written !== -errno.EINVAL;
      }
    }
    this.#writing = true;
    this.#writeFrom(rest);
  }

  #writeFrom(buffer: Buffer): void {
    write(this.fd, buffer, 0, buffer.length, null, (error, written) => {
      if (error?.code === 'EAGAIN') {
        setTimeout(() => this.#writeFrom(buffer), 10);
        return;
      }
      if (error) {
        // stdout is gone (EPIPE, EBADF): nothing more can be said there.
        this.#broken = true;
        this.#pending = [];
        this.#writing = false;
        return;
      }
      if (written < buffer.length) {
        this.#writeFrom(buffer.subarray(written));
        return;
      }
      this.#writing = false;
      this.#flush();
    });
  }
}

/**
 * Where `watch` writes: with --json one JSON object per line, field `event`
 * first, then `time` (ISO 8601) and `level`, then the event's fields;
 * otherwise readable lines. Lines other than guard events wait until `ready`
 * has been written, so that `ready` stays the first line.
 */
export class Output {
  readonly #sink = new LineSink(1);
  readonly #held: (() => void)[] = [];
  #readySeen = false;

  constructor(readonly json: boolean) {}

  guard<Name extends GuardEventName>(
    event: Name,
    payload: FlannelGuardEvents[Name][0],
    extra: object = {},
  ): void {
    const body = payload instanceof Error ? errorFields(payload) : payload;
    this.#write(event, GUARD_LEVELS[event], { ...body, ...extra }, () => describe(event, payload));
    if (event === 'ready') this.release();
  }

  /** A line that is not a guard event: the source's state, annotation writes, Events. */
  readonly line = (event: string, level: Level, fields: object, text: string): void => {
    if (this.#readySeen) this.#write(event, level, fields, () => text);
    else this.#held.push(() => this.#write(event, level, fields, () => text));
  };

  /** Writes the lines held back (after `ready`, or when exiting without it). */
  release(): void {
    this.#readySeen = true;
    for (const write of this.#held.splice(0)) write();
  }

  /** `text`: the readable line, made only without --json. */
  #write(event: string, level: Level, fields: object, text: () => string): void {
    const time = new Date().toISOString();
    this.#sink.write(
      this.json ? `${JSON.stringify({ event, time, level, ...fields })}\n` : `${time} ${text()}\n`,
    );
  }
}

export function printer(
  output: Output,
  services: WatchServices | null,
): <Name extends GuardEventName>(event: Name, payload: FlannelGuardEvents[Name][0]) => void {
  return (event, payload) => {
    output.guard(event, payload, event === 'ready' ? (services?.readyFields() ?? {}) : {});
  };
}
