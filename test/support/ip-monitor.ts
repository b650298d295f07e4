/**
 * `ip -ts monitor link` inside a test netns, parsed into timestamped link events. Used to measure
 * how long after creation udev rewrites a MAC, and to observe MAC flips in guard tests.
 */
import { EventEmitter } from 'node:events';
import type { ChildProcess } from 'node:child_process';
import { delay, terminate, type Netns } from './netns';

/** One RTM_NEWLINK / RTM_DELLINK as printed by `ip -ts monitor link`. */
export interface LinkEvent {
  /** Wall-clock ms (with µs fraction) at which `ip` received the message. */
  timeMs: number;
  ifindex: number;
  ifname: string;
  /** `link/ether` address, if present. */
  mac: string | null;
  deleted: boolean;
  raw: string;
}

const HEADER =
  /^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{6})\]\s+(Deleted\s+)?(\d+):\s+([^:@\s]+)(?:@[^:\s]*)?:/;

function parseTime(date: string, micros: string): number {
  return Date.parse(`${date}Z`) + Number(micros) / 1000;
}

/** A running `ip -ts monitor link` in a netns. */
export class IpLinkMonitor {
  readonly events: LinkEvent[] = [];
  private readonly emitter = new EventEmitter();
  private buf = '';
  private current: LinkEvent | undefined;

  private constructor(
    readonly ns: Netns,
    private readonly child: ChildProcess,
  ) {
    this.emitter.setMaxListeners(100);
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (d: string) => this.onData(d));
    child.once('exit', () => {
      this.flush();
      this.emitter.emit('exit');
    });
  }

  /**
   * Start the monitor and confirm it is subscribed: toggles `lo`'s MTU (65535 ⇄ 65536) until the
   * monitor reports an event for `lo` (bounded: 50 attempts, ~5 s), then restores it.
   */
  static async start(ns: Netns): Promise<IpLinkMonitor> {
    const child = ns.spawn(['ip', '-ts', 'monitor', 'link'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const mon = new IpLinkMonitor(ns, child);
    try {
      for (let attempt = 0; attempt < 50; attempt++) {
        if (mon.events.some((e) => e.ifname === 'lo')) break;
        await ns.ip(`link set lo mtu ${attempt % 2 === 0 ? 65535 : 65536}`);
        await mon.waitFor((e) => e.ifname === 'lo', 100).catch(() => undefined);
      }
      if (!mon.events.some((e) => e.ifname === 'lo')) throw new Error('ip monitor did not start');
      await ns.ip('link set lo mtu 65536');
      await delay(0);
      mon.events.length = 0;
    } catch (err) {
      await mon.stop();
      throw err;
    }
    return mon;
  }

  /** Resolve with the first (already seen or future) event matching `pred`; bounded. */
  waitFor(pred: (e: LinkEvent) => boolean, timeoutMs: number, fromIndex = 0): Promise<LinkEvent> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const e = this.events.slice(fromIndex).find(pred);
        if (e === undefined) return false;
        cleanup();
        resolve(e);
        return true;
      };
      const onEvent = (): void => {
        check();
      };
      const onExit = (): void => {
        if (check()) return;
        cleanup();
        reject(new Error('ip monitor exited'));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for a link event`));
      }, timeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        this.emitter.removeListener('event', onEvent);
        this.emitter.removeListener('exit', onExit);
      };
      this.emitter.on('event', onEvent);
      this.emitter.once('exit', onExit);
      check();
    });
  }

  /** Stop the monitor (idempotent). */
  async stop(): Promise<void> {
    await terminate(this.child, 1000);
  }

  private onData(d: string): void {
    this.buf += d;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      this.onLine(line);
    }
  }

  private onLine(line: string): void {
    const m = HEADER.exec(line);
    if (m !== null) {
      this.flush();
      this.current = {
        timeMs: parseTime(m[1] ?? '', m[2] ?? '0'),
        ifindex: Number(m[4]),
        ifname: m[5] ?? '',
        mac: null,
        deleted: m[3] !== undefined,
        raw: line,
      };
      return;
    }
    if (this.current === undefined) return;
    this.current.raw += `\n${line}`;
    const mac = /link\/ether ([0-9a-f:]{17})/.exec(line);
    if (mac !== null) this.current.mac = mac[1] ?? null;
    // The address line is the last line of a link message: publish now, don't wait for the next.
    if (/^\s+link\//.test(line)) this.flush();
  }

  private flush(): void {
    if (this.current === undefined) return;
    this.events.push(this.current);
    this.current = undefined;
    this.emitter.emit('event');
  }
}
