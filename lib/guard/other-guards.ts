/**
 * Whether another guard watches the same device. Each guard claims, per device name, the name
 * `flannel-guard/DEVICE` in the device's namespace (an abstract unix socket: native/name_claim.h):
 * the first holds it and each later one stays connected to it, so both sides know of the other
 * for as long as both run, whatever their mounts, PID namespaces or state dirs (a rolling update
 * with maxSurge, a second installation, a force-deleted pod whose container still runs). Two
 * guards converge on the same table, but every correction's writes are doubled; that is said
 * once when it starts (`shared`, others > 0) and once when it ends (others 0).
 */
import { Server, Socket } from 'node:net';

import type { SharedEvent } from './events';

export interface NameClaim {
  fd: number;
  held: boolean;
}

/** Claims a name in the guard's namespace (binding.claimName); throws when it cannot. */
export type ClaimName = (name: string) => NameClaim;

/** A holder whose queue of waiting guards was full is asked again after this long. */
const RETRY_MS = 30_000;
/** Connections a holder keeps: guards of one device are two or three, anything past is noise. */
const MAX_CONNECTIONS = 64;

interface Claim {
  server?: Server;
  /** Other guards connected to ours (we hold the name). */
  peers: Set<Socket>;
  /** Our connection to the guard holding the name. */
  holder?: Socket;
  retry?: NodeJS.Timeout;
  others: number;
}

export class OtherGuards {
  readonly #claimName: ClaimName;
  readonly #emit: (event: 'shared', payload: SharedEvent) => void;
  readonly #claims = new Map<string, Claim>();
  #closed = false;

  constructor(claimName: ClaimName, emit: (event: 'shared', payload: SharedEvent) => void) {
    this.#claimName = claimName;
    this.#emit = emit;
  }

  /** Guards of `device` besides this one, as last learnt. */
  others(device: string): number {
    return this.#claims.get(device)?.others ?? 0;
  }

  /** Claims `device`'s name once; later calls for the same name do nothing. */
  watch(device: string): void {
    if (this.#closed || this.#claims.has(device)) return;
    const claim: Claim = { peers: new Set(), others: 0 };
    this.#claims.set(device, claim);
    this.#claim(device, claim);
  }

  close(): void {
    this.#closed = true;
    for (const claim of this.#claims.values()) {
      clearTimeout(claim.retry);
      claim.server?.close();
      for (const peer of claim.peers) peer.destroy();
      claim.holder?.destroy();
    }
    this.#claims.clear();
  }

  #claim(device: string, claim: Claim): void {
    if (this.#closed) return;
    let result: NameClaim;
    try {
      result = this.#claimName(`flannel-guard/${device}`);
    } catch {
      // Best effort: a namespace going away meanwhile changes nothing about guarding it.
      return;
    }
    if (result.held) {
      this.#hold(device, claim, result.fd);
    } else if (result.fd >= 0) {
      const holder = new Socket({ fd: result.fd, readable: true, writable: false });
      holder.unref();
      holder.on('error', () => undefined); // a reset is the holder going, as an end is
      holder.once('close', () => {
        claim.holder = undefined;
        this.#set(device, claim, 0);
        this.#claim(device, claim); // it went: hold the name now, or join the next holder
      });
      holder.resume(); // nothing is sent; reading sees the end
      claim.holder = holder;
      this.#set(device, claim, 1);
    } else {
      this.#set(device, claim, Math.max(1, claim.others));
      claim.retry = setTimeout(() => {
        this.#claim(device, claim);
      }, RETRY_MS).unref();
    }
  }

  #hold(device: string, claim: Claim, fd: number): void {
    const server = new Server((peer) => {
      claim.peers.add(peer);
      peer.on('error', () => undefined);
      peer.once('close', () => {
        claim.peers.delete(peer);
        this.#set(device, claim, claim.peers.size);
      });
      peer.resume();
      this.#set(device, claim, claim.peers.size);
    });
    server.maxConnections = MAX_CONNECTIONS;
    server.on('error', () => undefined);
    server.listen({ fd });
    server.unref();
    claim.server = server;
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
