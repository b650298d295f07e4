#!/usr/bin/env node
/**
 * flannel-guard-cni as a Node.js program: the standalone chained CNI plugin (spec 1.0.0 and
 * 1.1.0), for custom wrappers and hosts without a guard. It answers by the same semantics as the
 * guard's socket (answer.ts), with ensureVtep in its own process as the backend
 * (standalone.ts). On a node, the shim (native/cni-shim) runs instead and asks the guard.
 *
 * Errors are the spec's error object on stdout with a non-zero exit status.
 */
import { writeSync } from 'node:fs';

import { monotonicMs } from '../core/clock';
import { packageVersion } from '../core/package-version';
import { answer, failure, releaseAnyway, NEWEST_VERSION, type CniResponse } from './answer';
import {
  CNI_ERRORS,
  CniError,
  MAX_STDIN_BYTES,
  STDIN_TIMEOUT_MS,
  SUPPORTED_VERSIONS,
  type CniEnvironment,
} from './request';
import { standaloneBackend } from './standalone';

/** How long a full stdout or stderr pipe may hold up the answer before it is given up. */
const WRITE_PATIENCE_MS = 2000;

/** Writes all of `text`; a full non-blocking pipe (EAGAIN) is waited for, within bounds. */
function write(fd: number, text: string): void {
  const buffer = Buffer.from(text);
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const deadline = monotonicMs() + WRITE_PATIENCE_MS;
  for (let offset = 0; offset < buffer.length;) {
    try {
      offset += writeSync(fd, buffer, offset);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN' || monotonicMs() > deadline) {
        return; // the reader is gone or stuck: nothing more can be said there
      }
      Atomics.wait(pause, 0, 0, 1);
    }
  }
}

/** All of stdin up to MAX_STDIN_BYTES; past that it stops reading and rejects. */
function readStdin(): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const onData = (chunk: Buffer): void => {
      length += chunk.length;
      if (length > MAX_STDIN_BYTES) {
        process.stdin.off('data', onData);
        process.stdin.destroy();
        reject(
          new CniError(
            CNI_ERRORS.DECODING_FAILURE,
            'failed to decode the network configuration',
            `stdin is larger than ${MAX_STDIN_BYTES} bytes`,
          ),
        );
        return;
      }
      chunks.push(chunk);
    };
    process.stdin.on('data', onData);
    process.stdin.once('end', () => {
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    process.stdin.once('error', reject);
  });
}

/**
 * The executable: env and stdin in, JSON on stdout, exit status out. Reading stdin has a bound
 * of its own (STDIN_TIMEOUT_MS); the budget is the configuration's and counts from the moment
 * the configuration is known, so a node busy starting many plugins at once (Node's own start-up
 * under CPU contention) never spends it before the configuration has said what it is.
 */
export async function main(env: CniEnvironment = process.env): Promise<void> {
  const answered = { already: false };
  const finish = (response: CniResponse): void => {
    if (answered.already) return;
    answered.already = true;
    for (const line of response.log) write(2, `${line}\n`);
    if (response.stdout !== undefined) write(1, `${JSON.stringify(response.stdout)}\n`);
    process.exitCode = response.status;
    // Past the budget something is still running: leave now rather than wait for it.
    if (response.overran) process.exit(response.status);
  };
  const stdinOverdue = setTimeout(() => {
    const note = `stdin did not end within ${STDIN_TIMEOUT_MS} ms`;
    finish({
      ...(env.CNI_COMMAND === 'DEL'
        ? releaseAnyway(note)
        : // Without the configuration there is no prevResult to pass on: the runtime may retry.
          failure(
            NEWEST_VERSION,
            new CniError(CNI_ERRORS.TRY_AGAIN_LATER, `flannel-guard-cni: ${note}`),
          )),
      overran: true,
    });
  }, STDIN_TIMEOUT_MS);
  let stdin: string;
  try {
    stdin = await readStdin();
  } catch (error) {
    finish(env.CNI_COMMAND === 'DEL' ? releaseAnyway(error) : failure(NEWEST_VERSION, error));
    return;
  } finally {
    clearTimeout(stdinOverdue);
  }
  if (answered.already) return; // the stdin bound answered first
  finish(await answer(env, stdin, standaloneBackend));
}

if (require.main === module) {
  if (process.env.CNI_COMMAND === undefined && process.stdin.isTTY) {
    write(
      2,
      `flannel-guard-cni ${packageVersion()}: a CNI plugin (spec ${SUPPORTED_VERSIONS.join(', ')}); run by a container runtime, not by hand\n`,
    );
  }
  void main();
}
