/**
 * The guard's CNI socket (`watch --cni-socket`): the shim a runtime executes for each pod
 * forwards its call here, and the guard answers from its live state (pod-check.ts), by the same
 * semantics as the standalone plugin (answer.ts). The socket is the node's root's alone: mode
 * 0600, and a peer that is not uid 0 (SO_PEERCRED) is refused before a byte is read. A request
 * is bounded in size and in time; a connection that sends something else is closed.
 */
import { lstatSync, chmodSync, mkdirSync, unlinkSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { dirname } from 'node:path';

import { monotonicMs } from '../core/clock';
import { binding } from '../core/binding';
import { isSystemError, messageOf, systemError } from '../core/errors';
import type { PodCheck, PodCheckDrift } from '../guard/pod-check';
import type { MeshSnapshot } from '../mesh/view';
import { isHealthyVerdict } from '../mesh/compare';
import { answer, type CniResponse, type VtepBackend, type VtepReport } from './answer';
import { STDIN_TIMEOUT_MS } from './request';
import { encodeAnswer, FrameError, RequestReader } from './frame';

/** How often a repair in flight is looked at again, until the VTEP is right or the budget ends. */
const SETTLE_POLL_MS = 2;

export interface GuardBackendDeps {
  pods: PodCheck;
  /** The mesh seen from this node, where the view runs: its peers on the device count too. */
  mesh?: () => Pick<MeshSnapshot, 'table'>;
}

/** A CNI call answered from the guard: what it keeps, repaired by its own correction path. */
export function guardBackend({ pods, mesh }: GuardBackendDeps): VtepBackend {
  const driftOf = (device: string): VtepReport['drift'] => {
    const own = pods.drift(device);
    if (own === null) {
      throw systemError('ENODEV', `${device} is not a device the guard keeps`, {
        interface: device,
      });
    }
    const peers = (mesh?.().table.peers ?? [])
      .filter((row) => row.device === device && !isHealthyVerdict(row.verdict))
      .map((row) => ({
        kind: 'neighbour' as const,
        subject: `${row.vtepIp} (node ${row.node})`,
        expected: row.publishedMac,
        observed: `${row.verdict} in the mesh`,
        fixable: false, // the mesh view's to repair, after its grace
      }));
    return [...own, ...peers];
  };
  return {
    async ensure(plugin, repair, signal) {
      const started = monotonicMs();
      const found = driftOf(plugin.device);
      if (!repair || found.length === 0) {
        return {
          ok: found.length === 0,
          drift: found,
          writes: 0,
          interrupted: false,
          durationMs: 0,
        };
      }
      // The device's own drift is the guard's to repair now; a peer's, the mesh view's, after
      // its grace (a peer flanneld is still programming is not fought over).
      pods.repair(plugin.device);
      const fixable = (): PodCheckDrift[] =>
        (pods.drift(plugin.device) ?? []).filter((drift) => drift.fixable);
      let left = fixable();
      while (left.length > 0 && !signal.aborted) {
        await new Promise((resolve) => setTimeout(resolve, SETTLE_POLL_MS));
        left = fixable();
      }
      const now = driftOf(plugin.device);
      return {
        ok: now.length === 0,
        drift: found, // what differed when asked, as ensureVtep reports it
        writes: Math.max(0, found.length - now.length),
        interrupted: left.length > 0,
        durationMs: monotonicMs() - started,
      };
    },
  };
}

export interface CniSocketServerOptions {
  path: string;
  backend: VtepBackend;
  /** A refused peer or a broken request, in one line. */
  onProblem?: (message: string) => void;
}

function answerBytes(response: CniResponse): Buffer {
  return encodeAnswer({
    status: response.status,
    stdout: response.stdout === undefined ? '' : `${JSON.stringify(response.stdout)}\n`,
    stderr: response.log.map((line) => `${line}\n`).join(''),
  });
}

/** Whether something answers at `path` (a guard already serves it): refused means stale. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createConnection(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => {
      resolve(false);
    });
  });
}

export class CniSocketServer {
  readonly path: string;
  readonly #server: Server;
  readonly #options: CniSocketServerOptions;
  readonly #connections = new Set<Socket>();
  #inode = 0;

  private constructor(options: CniSocketServerOptions) {
    this.path = options.path;
    this.#options = options;
    this.#server = createServer({ allowHalfOpen: true }, (socket) => {
      this.#serve(socket);
    });
  }

  /** Listens at `options.path`: a stale socket there is replaced, anything else refused. */
  static async listen(options: CniSocketServerOptions): Promise<CniSocketServer> {
    const { path } = options;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    let existing;
    try {
      existing = lstatSync(path);
    } catch (error) {
      if (!isSystemError(error) || error.code !== 'ENOENT') throw error;
    }
    if (existing !== undefined) {
      if (!existing.isSocket()) {
        throw systemError('EEXIST', `${path} exists and is not a socket: left alone`, {
          syscall: 'bind',
        });
      }
      if (await answers(path)) {
        throw systemError('EADDRINUSE', `another process serves ${path}`, { syscall: 'bind' });
      }
      unlinkSync(path);
    }
    const server = new CniSocketServer(options);
    await new Promise<void>((resolve, reject) => {
      server.#server.once('error', reject);
      server.#server.listen(path, () => {
        server.#server.off('error', reject);
        resolve();
      });
    });
    chmodSync(path, 0o600);
    server.#inode = lstatSync(path).ino;
    return server;
  }

  unref(): this {
    this.#server.unref();
    return this;
  }

  /** Stops listening, ends the calls in flight and removes the socket (when still its own). */
  async close(): Promise<void> {
    for (const socket of this.#connections) socket.destroy();
    await new Promise<void>((resolve) => {
      this.#server.close(() => {
        resolve();
      });
    });
    try {
      if (lstatSync(this.path).ino === this.#inode) unlinkSync(this.path);
    } catch {
      // gone already
    }
  }

  #problem(message: string): void {
    this.#options.onProblem?.(`cni socket ${this.path}: ${message}`);
  }

  #serve(socket: Socket): void {
    const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
    let uid: number;
    try {
      if (typeof fd !== 'number' || fd < 0) throw new Error('no descriptor to ask');
      uid = binding.peerCredentials(fd).uid;
    } catch (error) {
      this.#problem(`peer credentials unknown (${messageOf(error)}): closed`);
      socket.destroy();
      return;
    }
    if (uid !== 0) {
      this.#problem(`a peer with uid ${uid} refused: only root is answered`);
      socket.destroy();
      return;
    }
    this.#connections.add(socket);
    const reader = new RequestReader();
    let answered = false;
    const drop = (why: string): void => {
      this.#problem(`${why}: closed`);
      answered = true;
      socket.destroy();
    };
    // A request arrives whole at once: one that has not in this long never will.
    socket.setTimeout(STDIN_TIMEOUT_MS, () => {
      if (!answered) drop('the request did not arrive in time');
    });
    socket.on('close', () => this.#connections.delete(socket));
    socket.on('error', () => undefined); // the shim went away: nothing to answer
    socket.on('data', (chunk: Buffer) => {
      if (answered) return;
      let call;
      try {
        call = reader.push(chunk);
      } catch (error) {
        drop(error instanceof FrameError ? error.message : messageOf(error));
        return;
      }
      if (call === null) return;
      answered = true;
      socket.setTimeout(0);
      void answer(call.env, call.stdin, this.#options.backend).then((response) => {
        if (socket.destroyed) return;
        try {
          socket.end(answerBytes(response));
        } catch (error) {
          drop(messageOf(error)); // an answer past the frame's bound: the shim falls back
        }
      });
    });
    socket.on('end', () => {
      if (!answered) drop('the request was cut short');
    });
  }
}
