/**
 * The passive sign of broken TX checksum offload. A datagram or segment whose checksum fails is
 * counted by the node that receives it and dropped, so the namespace's counters (Udp and Tcp
 * InCsumErrors in /proc/net/snmp, Udp6InCsumErrors in snmp6) rise when a peer sends with broken
 * offload. They are read every `checksumErrorsPollMs`, with no traffic of their own. A rise is
 * reported (`checksumErrors`) and brings `--offload auto`'s next probe round forward: the usual
 * cause (the seed's VMXNET3, an old kernel with `--random-fully`) breaks every node alike, so
 * this node's own offload is the first suspect. The probes stay the verdict's evidence: the
 * counters cannot say which peer sent what. A sample of what arrives on each managed device
 * (a packet socket for a second, at most once a minute, nothing sent) says it: the bad frames'
 * source MACs are the senders' VTEP MACs, which the device's own ARP and FDB entries turn into
 * their VTEP and underlay addresses (`checksumSenders`).
 */
import { CHECKSUM_SAMPLE, CHECKSUM_SAMPLE_INTERVAL_MS } from '../core/defaults';
import type { ChecksumErrorCounters, ChecksumSample } from '../core/types';
import type { GuardContext } from './context';
import type { GuardMonitor } from './seams';
import type { GuardPorts } from './ports';
import type { GuardConfig } from './config';
import type { ManagedDevice } from './device';
import type { ChecksumErrorsEvent, ChecksumSender, ChecksumSendersEvent } from './events';

const PROTOCOLS = ['udp', 'tcp', 'udp6'] as const;

/** What each counter rose by from `before` to `now` (null: the kernel keeps no such counter). */
export function checksumErrorRise(
  now: ChecksumErrorCounters,
  before: ChecksumErrorCounters,
): ChecksumErrorCounters {
  const by = (protocol: (typeof PROTOCOLS)[number]): number | null => {
    const [current, previous] = [now[protocol], before[protocol]];
    // A counter the kernel started keeping (or reset: a new namespace) counts from itself.
    if (current === null) return null;
    return previous === null || current < previous ? current : current - previous;
  };
  return { udp: by('udp'), tcp: by('tcp'), udp6: by('udp6') };
}

export interface ChecksumErrorWatchParts {
  /** Brings probe rounds forward; the names of the devices it did. */
  recheck(at: number): string[];
  /** The devices a rise samples. */
  devices(): ManagedDevice[];
}

/** What the checksum-error watch may touch: it reads counters and samples, and writes nothing. */
export type ChecksumErrorWatchContext = Pick<
  GuardContext,
  'clock' | 'emit' | 'fail' | 'isClosed'
> & {
  readonly config: Pick<GuardConfig, 'checksumErrorsPollMs' | 'netns'>;
  readonly monitor: Pick<GuardMonitor, 'restoreSet'>;
  readonly ports: Pick<GuardPorts, 'checksumErrors' | 'forwardingEntries' | 'sampleChecksums'>;
};

export class ChecksumErrorWatch {
  readonly #ctx: ChecksumErrorWatchContext;
  readonly #parts: ChecksumErrorWatchParts;
  #last: { counters: ChecksumErrorCounters; at: number } | null = null;
  #rising = false;
  #cancelTimer: () => void = () => undefined;
  #sampledAt = Number.NEGATIVE_INFINITY;
  #sampling = false;
  /** A sample failed (no CAP_NET_RAW): said once, not tried again. */
  #sampleFailed = false;

  constructor(context: ChecksumErrorWatchContext, parts: ChecksumErrorWatchParts) {
    this.#ctx = context;
    this.#parts = parts;
  }

  /**
   * Reads the counters now (the baseline: what rose before is history) and then every
   * `checksumErrorsPollMs` (0: never).
   */
  start(): void {
    if (this.#ctx.config.checksumErrorsPollMs > 0) this.#read();
  }

  /** The counters at the last read; null before the first or after a failed one. */
  totals(): ChecksumErrorCounters | null {
    return this.#last?.counters ?? null;
  }

  close(): void {
    this.#cancelTimer();
  }

  #read(): void {
    const { ports, clock } = this.#ctx;
    const at = clock.now();
    let counters: ChecksumErrorCounters;
    try {
      counters = ports.checksumErrors();
    } catch (error) {
      // Said once; a namespace whose counters cannot be read will not become readable.
      this.#last = null;
      this.#ctx.fail(error);
      return;
    }
    const last = this.#last;
    this.#last = { counters, at };
    if (last !== null) {
      const rose = checksumErrorRise(counters, last.counters);
      const rising = PROTOCOLS.some((protocol) => (rose[protocol] ?? 0) > 0);
      if (rising) {
        this.#ctx.emit('checksumErrors', {
          netns: this.#ctx.config.netns?.label ?? null,
          rise: rose,
          totals: counters,
          intervalMs: at - last.at,
          onset: !this.#rising,
          recheck: this.#parts.recheck(at),
        });
        this.#sampleSoon(at);
      }
      this.#rising = rising;
    }
    this.#cancelTimer = clock.setTimeout(() => {
      if (!this.#ctx.isClosed()) this.#read();
    }, this.#ctx.config.checksumErrorsPollMs);
  }

  #sampleSoon(at: number): void {
    if (this.#sampling || this.#sampleFailed) return;
    if (at - this.#sampledAt < CHECKSUM_SAMPLE_INTERVAL_MS) return;
    this.#sampling = true;
    this.#sampledAt = at;
    void this.#sampleDevices().finally(() => {
      this.#sampling = false;
    });
  }

  async #sampleDevices(): Promise<void> {
    const { ports, clock } = this.#ctx;
    for (const device of this.#parts.devices()) {
      const started = clock.now();
      let sample: ChecksumSample;
      try {
        sample = await ports.sampleChecksums(device.name, CHECKSUM_SAMPLE);
      } catch (error) {
        this.#sampleFailed = true;
        if (!this.#ctx.isClosed()) this.#ctx.fail(error);
        return;
      }
      if (this.#ctx.isClosed()) return;
      if (sample.bad === 0) continue;
      const senders = await this.#name(device, sample);
      if (this.#ctx.isClosed()) return;
      const event: ChecksumSendersEvent = {
        netns: this.#ctx.config.netns?.label ?? null,
        device: device.name,
        frames: sample.frames,
        checked: sample.checked,
        bad: sample.bad,
        sampleMs: clock.now() - started,
        senders,
      };
      this.#ctx.emit('checksumSenders', event);
    }
  }

  /** The sample's senders, most bad checksums first, with the addresses the device knows them by. */
  async #name(device: ManagedDevice, sample: ChecksumSample): Promise<ChecksumSender[]> {
    const vteps = new Map<string, string>();
    for (const entry of this.#ctx.monitor.restoreSet(device.ifindex)) {
      if (entry.lladdr !== null && entry.destination !== null) {
        vteps.set(entry.lladdr, entry.destination);
      }
    }
    const underlays = new Map<string, string>();
    try {
      for (const entry of await this.#ctx.ports.forwardingEntries(device.ifindex)) {
        if (entry.lladdr !== null && entry.destination !== null) {
          underlays.set(entry.lladdr, entry.destination);
        }
      }
    } catch {
      // The underlay addresses stay unknown; the senders' MACs and VTEPs are the report.
    }
    return sample.senders
      .map((sender) => ({
        mac: sender.mac,
        vtep: vteps.get(sender.mac) ?? null,
        underlay: underlays.get(sender.mac) ?? null,
        udp: sender.udp,
        tcp: sender.tcp,
      }))
      .sort((a, b) => b.udp + b.tcp - (a.udp + a.tcp));
  }
}

const PROTOCOL_NAMES: Record<(typeof PROTOCOLS)[number], string> = {
  udp: 'UDP',
  tcp: 'TCP',
  udp6: 'UDPv6',
};

/** "3 UDP, 2 TCP": the counters above zero; '' when none is. */
export function describeChecksumCounts(counts: ChecksumErrorCounters): string {
  return PROTOCOLS.flatMap((protocol) => {
    const count = counts[protocol] ?? 0;
    return count > 0 ? [`${count} ${PROTOCOL_NAMES[protocol]}`] : [];
  }).join(', ');
}

/** One line for a `checksumErrors` event (the log, the Kubernetes Event). */
export function describeChecksumErrors(e: ChecksumErrorsEvent): string {
  const recheck =
    e.recheck.length > 0 ? `; the offload of ${e.recheck.join(', ')} is measured again now` : '';
  return `${describeChecksumCounts(e.rise)} packets with bad checksums received in ${(e.intervalMs / 1000).toFixed(1)} s and dropped: a peer sends with broken TX checksum offload (tx-checksum-ip-generic; --offload auto on every node finds and fixes the sender)${recheck}`;
}

/** "VTEP 198.18.1.0 (underlay 192.0.2.11, 0e:00:00:00:00:01): 3 UDP, 2 TCP" for one sender. */
export function describeChecksumSender(sender: ChecksumSender): string {
  const where = [
    sender.underlay === null ? null : `underlay ${sender.underlay}`,
    sender.mac,
  ].filter((part) => part !== null);
  const name = sender.vtep === null ? 'an unknown peer' : `VTEP ${sender.vtep}`;
  return `${name} (${where.join(', ')}): ${describeChecksumCounts({ udp: sender.udp, tcp: sender.tcp, udp6: null })}`;
}

/** One line for a `checksumSenders` event. */
export function describeChecksumSenders(e: ChecksumSendersEvent): string {
  return `${e.device}: ${e.bad} of ${e.checked} packets checked in ${(e.sampleMs / 1000).toFixed(1)} s carried bad checksums, sent by ${e.senders.map(describeChecksumSender).join('; ')}: turn tx-checksum-ip-generic off on the sending nodes (--offload auto there does it)`;
}
