/**
 * Whether another guard watches the same device. Each guard claims, per device name, the name
 * `flannel-guard/DEVICE` in the device's namespace (an abstract unix socket: native/name_claim.h):
 * the first holds it and each later one stays connected to it, so both sides know of the other
 * for as long as both run, whatever their mounts, PID namespaces or state dirs (a rolling update
 * with maxSurge, a second installation, a force-deleted pod whose container still runs). Two
 * guards converge on the same table, but every correction's writes are doubled; that is said
 * once when it starts (`shared`, others > 0) and once when it ends (others 0).
 */
import { closeSync } from 'node:fs';

import type { SharedEvent } from './events';

export interface NameClaim {
  fd: number;
  held: boolean;
}

/** Names claimed in the guard's namespace (native/name_claim.h), and their watch. */
export interface NameClaims {
  /** Claims a name (binding.claimName); throws when it cannot. */
  claim(name: string): NameClaim;
  /**
   * Watches a claim's socket on the loop, taking it (binding.ClaimWatch); throws, leaving it, when
   * it cannot. `onOthers` hears how many other guards it knows of when that changes.
   */
  watch(claim: NameClaim, onOthers: (others: number) => void): { close(): void };
}

/** A holder whose queue of waiting guards was full is asked again after this long. */
const RETRY_MS = 30_000;

interface Claim {
  /** The claim's socket, watched: it counts the others. */
  watch?: { close(): void };
  retry?: NodeJS.Timeout;
  others: number;
}

export class OtherGuards {
  readonly #names: NameClaims;
  readonly #emit: (event: 'shared', payload: SharedEvent) => void;
  readonly #claims = new Map<string, Claim>();
  #closed = false;

  constructor(names: NameClaims, emit: (event: 'shared', payload: SharedEvent) => void) {
    this.#names = names;
    this.#emit = emit;
  }

  /** Guards of `device` besides this one, as last learnt. */
  others(device: string): number {
    return this.#claims.get(device)?.others ?? 0;
  }

  /** Claims `device`'s name once; later calls for the same name do nothing. */
  watch(device: string): void {
    if (this.#closed || this.#claims.has(device)) return;
    const claim: Claim = { others: 0 };
    this.#claims.set(device, claim);
    this.#claim(device, claim);
  }

  close(): void {
    this.#closed = true;
    for (const claim of this.#claims.values()) {
      clearTimeout(claim.retry);
      claim.watch?.close();
    }
    this.#claims.clear();
  }

  #claim(device: string, claim: Claim): void {
    if (this.#closed) return;
    let result: NameClaim;
    try {
      result = this.#names.claim(`flannel-guard/${device}`);
    } catch {
      // Best effort: a namespace going away meanwhile changes nothing about guarding it.
      return;
    }
    if (result.fd < 0) {
      this.#set(device, claim, Math.max(1, claim.others));
      claim.retry = setTimeout(() => {
        this.#claim(device, claim);
      }, RETRY_MS).unref();
      return;
    }
    const { held } = result;
    try {
      claim.watch = this.#names.watch(result, (others) => {
        if (held) {
          this.#set(device, claim, others);
          return;
        }
        // The holder went: hold the name now, or join the next holder.
        claim.watch?.close();
        claim.watch = undefined;
        this.#set(device, claim, 0);
        this.#claim(device, claim);
      });
    } catch {
      closeSync(result.fd); // not watched: still ours
      return;
    }
    if (!held) this.#set(device, claim, 1);
  }

  #set(device: string, claim: Claim, others: number): void {
    const was = claim.others;
    claim.others = others;
    if (this.#closed || was > 0 === others > 0) return;
    this.#emit('shared', {
      device,
      others,
      detail:
        others > 0
          ? `another flannel-guard watches ${device} in this namespace: both correct every rewrite, doubling the writes (stop one: a second installation, or a pod left from a rolling update)`
          : `${device} is watched by this guard alone again`,
    });
  }
}
