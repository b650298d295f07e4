/**
 * `--offload auto`: TX checksum offload turned off only where it is measured broken. Through the
 * VXLAN device, each round sends every sampled peer VTEP (from the device's permanent ARP
 * entries) an ICMP echo, a UDP datagram and a TCP SYN to closed ports. The echo's checksum is
 * always computed in software, so it is answered either way; the peer answers the UDP datagram
 * (ICMP port unreachable) and the SYN (RST) only if their checksums arrived right. Echo answered
 * but UDP and TCP silent on every answering peer, in `confirmRounds` rounds in a row: the
 * feature goes off, and is kept off only if the next rounds answer (it fixed it); otherwise it
 * goes back on (not the checksum: a filter). Rounds are at least a second apart per peer (the
 * peers' ICMP rate limit, icmp_ratelimit 1000 ms) and bounded in peers, count and time; a
 * device's verdict holds for its life (never on again after off helped: no flapping), checked
 * again every `slowMs`, and a re-created device starts over.
 */
import type { GuardContext } from './context';
import type { GuardMonitor } from './seams';
import type { GuardPorts } from './ports';
import type { GuardConfig } from './config';
import type { ManagedDevice } from './device';
import type { PathAnswer, VerdictEvent } from './events';
import type { OffloadEnforcement } from './offload';
import type { AutoOffloadPolicy } from './offload-auto-policy';

export type PathVerdict = 'healthy' | 'broken' | 'inconclusive';

function peerCount(count: number): string {
  return `${count} peer${count === 1 ? '' : 's'}`;
}

/** What one round's answers say about this node's checksums. */
export function judgePaths(answers: readonly PathAnswer[]): { verdict: PathVerdict; why: string } {
  const reachable = answers.filter((a) => a.echo);
  if (reachable.length === 0) {
    return {
      verdict: 'inconclusive',
      why: `none of ${peerCount(answers.length)} answered an ICMP echo`,
    };
  }
  const silent = reachable.filter((a) => !a.udp && !a.tcp);
  if (silent.length === 0) {
    return { verdict: 'healthy', why: `${peerCount(reachable.length)} answered echo, UDP and TCP` };
  }
  if (silent.length === reachable.length) {
    return {
      verdict: 'broken',
      why: `${peerCount(reachable.length)} answered ICMP echo but neither UDP nor TCP`,
    };
  }
  return {
    verdict: 'inconclusive',
    why: `${peerCount(reachable.length - silent.length)} answered UDP or TCP, ${silent.length} did not: a filter on some paths, not this node's checksums`,
  };
}

/** Closed ports in traceroute's range; one per round. */
const PROBE_PORT_BASE = 33_434;
const PROBE_PORT_SPAN = 100;
/** An inconclusive verdict takes this many times the rounds a conclusive one does. */
const INCONCLUSIVE_FACTOR = 3;
/** Rounds kept as evidence in a verdict. */
const EVIDENCE_ROUNDS = 4;
/**
 * A settled verdict is measured again early (the checksum-error counters rose) at most this
 * often: a peer that keeps sending bad checksums must not make the slow re-check a fast one.
 */
const EARLY_RECHECK_MS = 60_000;

type Phase =
  /** Measuring with the feature as the guard found it. */
  | 'testing'
  /** The feature was turned off: does that fix it? */
  | 'checking-fix'
  /** A verdict holds; checked again after `slowMs`. */
  | 'settled';

interface DeviceProbing {
  phase: Phase;
  streak: { verdict: PathVerdict; rounds: number };
  rounds: number;
  probes: number;
  startedAt: number;
  evidence: VerdictEvent['evidence'];
  /** Peers that answered the last round's echo: kept in the next sample. */
  answering: Set<string>;
  /** The last verdict reported (a re-check that agrees is not reported again). */
  reported: VerdictEvent['verdict'] | null;
  /** When a round was last brought forward (recheckEarly). */
  earlyAt: number | null;
  cancelTimer: () => void;
}

/**
 * What `--offload auto` may touch: it probes paths; the feature it reads and its one write go
 * through OffloadEnforcement, which keeps the device's offload states.
 */
export type OffloadAutoContext = Pick<
  GuardContext,
  'clock' | 'devices' | 'emit' | 'fail' | 'isClosed'
> & {
  readonly config: Pick<GuardConfig, 'dryRun'>;
  readonly monitor: Pick<GuardMonitor, 'restoreSet'>;
  readonly ports: Pick<GuardPorts, 'probePaths'>;
};

export class OffloadAuto {
  readonly #ctx: OffloadAutoContext;
  readonly #enforcement: OffloadEnforcement;
  readonly #policy: AutoOffloadPolicy;
  readonly #random: () => number;
  readonly #devices = new Map<ManagedDevice, DeviceProbing>();

  constructor(
    context: OffloadAutoContext,
    enforcement: OffloadEnforcement,
    policy: AutoOffloadPolicy,
    random: () => number,
  ) {
    this.#ctx = context;
    this.#enforcement = enforcement;
    this.#policy = policy;
    this.#random = random;
  }

  /** Begins measuring a device the guard took on (created, found at start, or managed anew). */
  start(device: ManagedDevice, at: number): void {
    if (this.#devices.has(device) || this.#ctx.config.dryRun) return;
    const state: DeviceProbing = {
      phase: 'testing',
      streak: { verdict: 'inconclusive', rounds: 0 },
      rounds: 0,
      probes: 0,
      startedAt: at,
      evidence: [],
      reported: null,
      earlyAt: null,
      answering: new Set(),
      cancelTimer: () => undefined,
    };
    this.#devices.set(device, state);
    this.#schedule(device, state, 0);
  }

  /** The device's last reported verdict (null: none yet). */
  verdictOf(device: ManagedDevice): VerdictEvent['verdict'] | null {
    return this.#devices.get(device)?.reported ?? null;
  }

  /**
   * Something suggests the offload broke (the checksum-error counters rose): a settled device
   * is measured again now instead of at its slow re-check. Whether a round was brought forward
   * (not while one is under way, nor more often than EARLY_RECHECK_MS).
   */
  recheckEarly(device: ManagedDevice, at: number): boolean {
    const state = this.#devices.get(device);
    if (state?.phase !== 'settled') return false;
    if (state.earlyAt !== null && at - state.earlyAt < EARLY_RECHECK_MS) return false;
    state.earlyAt = at;
    this.#schedule(device, state, 0);
    return true;
  }

  /** The device is gone or no longer managed: its rounds stop. */
  release(device: ManagedDevice): void {
    this.#devices.get(device)?.cancelTimer();
    this.#devices.delete(device);
  }

  close(): void {
    for (const device of [...this.#devices.keys()]) this.release(device);
  }

  #schedule(device: ManagedDevice, state: DeviceProbing, ms: number): void {
    state.cancelTimer();
    state.cancelTimer = this.#ctx.clock.setTimeout(() => {
      void this.#round(device, state);
    }, ms);
  }

  /**
   * The device's permanent IPv4 neighbours: its peers' VTEPs. The sample keeps the peers that
   * answered an echo before (a node that is down answers nothing and tells nothing) and fills
   * up with a random choice of the others.
   */
  #sample(device: ManagedDevice, state: DeviceProbing): string[] {
    const all = [
      ...new Set(
        this.#ctx.monitor
          .restoreSet(device.ifindex)
          .filter((n) => n.family === 'inet')
          .flatMap((n) => (n.destination === null ? [] : [n.destination])),
      ),
    ];
    const known = all.filter((peer) => state.answering.has(peer));
    const others = all.filter((peer) => !state.answering.has(peer));
    for (let i = others.length - 1; i > 0; i -= 1) {
      const j = Math.floor(this.#random() * (i + 1));
      [others[i], others[j]] = [others[j] as string, others[i] as string];
    }
    return [...known, ...others].slice(0, this.#policy.samplePeers);
  }

  async #round(device: ManagedDevice, state: DeviceProbing): Promise<void> {
    const { ports, clock } = this.#ctx;
    const policy = this.#policy;
    const peers = this.#sample(device, state);
    if (peers.length === 0) {
      const kept = this.#ctx.monitor.restoreSet(device.ifindex);
      if (kept.some((n) => n.family === 'inet6') && state.reported === null) {
        // flannel-v6.*: the probes are IPv4's; say so once, and leave the offload as it is.
        this.#settle(
          device,
          state,
          'inconclusive',
          'kept-on',
          clock.now(),
          'IPv6 peers only: their paths are not probed (IPv4 only); the offload is left as it is',
        );
        return;
      }
      // No peer programmed yet (a new node, flanneld not done): look again later.
      this.#schedule(device, state, policy.roundMs * 4);
      return;
    }
    const port = PROBE_PORT_BASE + Math.floor(this.#random() * PROBE_PORT_SPAN);
    let answers: PathAnswer[];
    try {
      answers = await ports.probePaths(device.name, peers, {
        timeoutMs: policy.timeoutMs,
        udpPort: port,
        tcpPort: port,
        echoId: Math.floor(this.#random() * 0x10000),
      });
    } catch (error) {
      if (!this.#current(device, state)) return;
      this.#ctx.fail(error);
      this.#schedule(device, state, policy.slowMs);
      return;
    }
    if (!this.#current(device, state)) return;
    state.rounds += 1;
    state.probes += 3 * peers.length;
    state.answering = new Set(answers.filter((a) => a.echo).map((a) => a.address));
    // Read each round: without a policy for it nothing else follows the feature.
    const active = this.#readFeature(device);
    state.evidence = [...state.evidence, { offload: active ?? true, answers }].slice(
      -EVIDENCE_ROUNDS,
    );
    const judged = judgePaths(answers);
    state.streak =
      state.streak.verdict === judged.verdict
        ? { verdict: judged.verdict, rounds: state.streak.rounds + 1 }
        : { verdict: judged.verdict, rounds: 1 };
    this.#decide(device, state, judged.why, clock.now());
  }

  #decide(device: ManagedDevice, state: DeviceProbing, why: string, at: number): void {
    const policy = this.#policy;
    const { verdict, rounds } = state.streak;
    // No verdict is given up on as fast as one is reached: fresh samples may find peers that answer.
    const needed =
      verdict === 'inconclusive'
        ? policy.confirmRounds * INCONCLUSIVE_FACTOR
        : policy.confirmRounds;
    const confirmed = rounds >= needed;
    const feature = policy.feature;
    const active = device.offloads[feature] ?? null;
    if (state.phase === 'checking-fix') {
      if (verdict === 'healthy' && confirmed) {
        // Off fixed it: the device keeps the feature off for its life.
        device.offloadPolicy = { [feature]: false };
        this.#settle(
          device,
          state,
          'broken',
          'turned-off',
          at,
          `${why} with ${feature} off; with it on they answered only ICMP echo: TX checksum offload is broken on this path`,
        );
        return;
      }
      if (verdict !== 'healthy' && confirmed) {
        this.#setFeature(device, true);
        this.#settle(
          device,
          state,
          'inconclusive',
          'restored-on',
          at,
          `turning ${feature} off did not make UDP or TCP answer (${why}): not the checksum; turned back on`,
        );
        return;
      }
      this.#schedule(device, state, policy.roundMs);
      return;
    }
    if (state.phase === 'settled') {
      // A re-check: only a change is news. A device whose fix held stays off whatever it shows.
      if (verdict === 'broken' && confirmed && device.offloadPolicy === null && active !== false) {
        this.#turnOff(device, state);
        return;
      }
      if (!confirmed) {
        this.#schedule(device, state, policy.roundMs);
        return;
      }
      const reported = device.offloadPolicy !== null ? 'broken' : verdict;
      if (reported !== state.reported) {
        this.#settle(
          device,
          state,
          verdict,
          device.offloadPolicy !== null ? 'kept-off' : 'kept-on',
          at,
          why,
        );
      } else this.#schedule(device, state, policy.slowMs);
      return;
    }
    if (!confirmed) {
      this.#schedule(device, state, policy.roundMs);
      return;
    }
    if (verdict === 'broken' && active !== false) {
      this.#turnOff(device, state);
      return;
    }
    // Healthy with the feature as found (on, or already off by someone else), or no verdict.
    this.#settle(device, state, verdict, active === false ? 'kept-off' : 'kept-on', at, why);
  }

  #turnOff(device: ManagedDevice, state: DeviceProbing): void {
    this.#setFeature(device, false);
    state.phase = 'checking-fix';
    state.streak = { verdict: 'inconclusive', rounds: 0 };
    this.#schedule(device, state, this.#policy.roundMs);
  }

  #settle(
    device: ManagedDevice,
    state: DeviceProbing,
    verdict: VerdictEvent['verdict'],
    action: VerdictEvent['action'],
    at: number,
    detail: string,
  ): void {
    state.phase = 'settled';
    state.reported = verdict;
    this.#ctx.emit('verdict', {
      device: device.name,
      ifindex: device.ifindex,
      feature: this.#policy.feature,
      verdict,
      action,
      active: device.offloads[this.#policy.feature] ?? null,
      detail,
      rounds: state.rounds,
      probes: state.probes,
      msSinceStart: at - state.startedAt,
      evidence: state.evidence,
    });
    state.streak = { verdict: 'inconclusive', rounds: 0 };
    this.#schedule(device, state, this.#policy.slowMs);
  }

  #setFeature(device: ManagedDevice, enable: boolean): void {
    this.#enforcement.apply(device, { [this.#policy.feature]: enable }, 'probe');
  }

  #readFeature(device: ManagedDevice): boolean | null {
    return this.#enforcement.readFeature(device, this.#policy.feature);
  }

  /** Whether the round's device is still the one being measured (not released meanwhile). */
  #current(device: ManagedDevice, state: DeviceProbing): boolean {
    return this.#devices.get(device) === state && !this.#ctx.isClosed();
  }
}
