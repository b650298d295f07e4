/**
 * The passive sign of broken TX checksum offload. A datagram or segment whose checksum fails is
 * counted by the node that receives it and dropped, so the namespace's counters (Udp and Tcp
 * InCsumErrors in /proc/net/snmp, Udp6InCsumErrors in snmp6) rise when a peer sends with broken
 * offload. They are read every `checksumErrorsPollMs`, with no traffic of their own. A rise is
 * reported (`checksumErrors`) and brings `--offload auto`'s next probe round forward: the usual
 * cause (the seed's VMXNET3, an old kernel with `--random-fully`) breaks every node alike, so
 * this node's own offload is the first suspect. The probes stay the verdict's evidence: the
 * counters cannot say which peer sent what.
 */
import type { ChecksumErrorCounters } from '../core/types';
import type { GuardContext } from './context';
import type { ChecksumErrorsEvent } from './events';

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

export class ChecksumErrorWatch {
  readonly #ctx: GuardContext;
  /** Brings probe rounds forward; the names of the devices it did. */
  readonly #recheck: (at: number) => string[];
  #last: { counters: ChecksumErrorCounters; at: number } | null = null;
  #rising = false;
  #cancelTimer: () => void = () => undefined;

  constructor(context: GuardContext, recheck: (at: number) => string[]) {
    this.#ctx = context;
    this.#recheck = recheck;
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
          recheck: this.#recheck(at),
        });
      }
      this.#rising = rising;
    }
    this.#cancelTimer = clock.setTimeout(() => {
      if (!this.#ctx.isClosed()) this.#read();
    }, this.#ctx.config.checksumErrorsPollMs);
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
