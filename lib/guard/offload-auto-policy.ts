/**
 * `offload: 'auto'`'s settings (how it probes), validated once by guardConfig: a leaf the
 * configuration can import without reaching up to the part that probes.
 */
import { rejectUnknownOptions } from '../core/options';
import { RANGES, integerInRange } from '../core/validate';

export interface AutoOffloadPolicy {
  /** The feature turned off when broken. */
  readonly feature: string;
  /** Between rounds; at least the peers' ICMP rate limit (1000 ms). */
  readonly roundMs: number;
  /** Rounds in a row that must agree before anything changes. */
  readonly confirmRounds: number;
  /** A settled verdict is checked again this often. */
  readonly slowMs: number;
  /** Peers probed per round, sampled from the device's permanent ARP entries. */
  readonly samplePeers: number;
  /** How long a round waits for answers. */
  readonly timeoutMs: number;
}

const DEFAULT_AUTO_OFFLOAD: AutoOffloadPolicy = Object.freeze({
  feature: 'tx-checksum-ip-generic',
  roundMs: 1_500,
  confirmRounds: 2,
  slowMs: 600_000,
  samplePeers: 8,
  timeoutMs: 1_000,
});

/** The peers' ICMP rate limit (icmp_ratelimit's default): no peer is probed more often. */
const MIN_ROUND_MS = 1_000;
/** Validates and completes `offload: 'auto'`'s settings; throws EINVAL naming the key. */
export function autoOffloadPolicy(policy: Partial<AutoOffloadPolicy> = {}): AutoOffloadPolicy {
  rejectUnknownOptions(
    policy,
    Object.keys(DEFAULT_AUTO_OFFLOAD),
    'autoOffload policy',
    'autoOffload.',
  );
  const complete = { ...DEFAULT_AUTO_OFFLOAD, ...policy };
  const { timerMs } = RANGES;
  integerInRange(complete.roundMs, { ...timerMs, min: MIN_ROUND_MS }, 'autoOffload.roundMs');
  integerInRange(complete.slowMs, timerMs, 'autoOffload.slowMs');
  integerInRange(
    complete.confirmRounds,
    { min: 1, max: 10, unit: '' },
    'autoOffload.confirmRounds',
  );
  // The native prober takes at most 64 addresses and waits at most 10 s.
  integerInRange(complete.samplePeers, { min: 1, max: 64, unit: '' }, 'autoOffload.samplePeers');
  integerInRange(complete.timeoutMs, { min: 1, max: 10_000, unit: 'ms' }, 'autoOffload.timeoutMs');
  return Object.freeze(complete);
}
