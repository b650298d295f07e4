/** The record of one device a guard manages, and the desired MAC it is held to. */
import type { MacSourceKind } from './events';

export interface ManagedDevice {
  ifindex: number;
  name: string;
  /** first-seen / pinned-at-start MAC. */
  pin: string | null;
  pinKind: 'first-seen' | 'pinned-at-start' | null;
  /** The pin was taken from the state file of an earlier run (pinned then, as pinKind says). */
  pinFromStateFile: boolean;
  /**
   * For a device seen created: the source's answer at that moment, which
   * describes the device it replaces until the source publishes anew.
   */
  staleSourceMac: string | undefined;
  createdAt: number | null;
  /** Rewrites seen since the guard took the device on. */
  rewrites: number;
  /** When the MAC left the desired value (start of the correction latency); null when at it. */
  driftSince: number | null;
  /**
   * A drift found put back when its correction came, but with a later change to the MAC in
   * the batch being handled: reported when that change is (its answer comes after it).
   */
  answerDue: { since: number; neighbours: number } | null;
  /** Set on ENODEV: the device is going away; nothing is written until its DELLINK. */
  vanishing: boolean;
  /**
   * The source changed its answer while the drift was held back (a contest, a backoff): its
   * answer is newer than the device's MAC, so `adopt` corrects to it instead of publishing the
   * MAC. Cleared by the next rewrite and when the drift ends.
   */
  sourceNewer: boolean;
  /**
   * This guard's adoptions for the device: the MACs it asked the source to store that are in
   * flight, and the last one stored. The source answering one of them is the echo of our own
   * adoption, never an answer newer than the device's MAC.
   */
  adoptions: { inFlight: string[]; stored: string | null };
  /** Last known active state of each policy feature. */
  offloads: Record<string, boolean | null>;
  /** What `--offload auto` measured this device needs (null: nothing, or not measured). */
  offloadPolicy: Readonly<Record<string, boolean>> | null;
}

export interface DesiredMac {
  mac: string;
  kind: MacSourceKind;
}

/**
 * A device record as the guard starts keeping it: taken on at `createdAt` (null: it existed
 * before the guard), pinned at `pin` as `pinKind` says (null: not pinned), nothing seen yet.
 */
export function newManagedDevice(
  ifindex: number,
  name: string,
  taken: {
    pin: string | null;
    pinKind: ManagedDevice['pinKind'];
    createdAt: number | null;
    staleSourceMac: string | undefined;
  } = { pin: null, pinKind: null, createdAt: null, staleSourceMac: undefined },
): ManagedDevice {
  return {
    ifindex,
    name,
    ...taken,
    pinFromStateFile: false,
    rewrites: 0,
    driftSince: null,
    answerDue: null,
    vanishing: false,
    sourceNewer: false,
    adoptions: { inFlight: [], stored: null },
    offloads: {},
    offloadPolicy: null,
  };
}
