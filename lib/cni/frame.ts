/**
 * The frames the shim (native/cni-shim/shim.c) and the guard's socket (server.ts) exchange, one
 * request and one answer per connection, little-endian:
 *
 *   request  "FGC1" u32 envLength u32 stdinLength, the CNI_* variables as NUL-terminated
 *            KEY=VALUE, then stdin
 *   answer   "FGR1" u32 exitStatus u32 stdoutLength u32 stderrLength, stdout, then stderr
 *
 * Pure: no sockets here. Every length is bounded before anything is held for it.
 */
import { MAX_STDIN_BYTES, type CniEnvironment } from './request';

const REQUEST_MAGIC = Buffer.from('FGC1');
const ANSWER_MAGIC = Buffer.from('FGR1');
const REQUEST_HEADER = 12;
const ANSWER_HEADER = 16;
/** As the shim bounds them. */
export const MAX_ENV_BYTES = 64 * 1024;
export const MAX_STDERR_BYTES = 64 * 1024;
export const MAX_STDOUT_BYTES = MAX_STDIN_BYTES + 64 * 1024;

export interface CniCall {
  env: CniEnvironment;
  stdin: string;
}

export interface CniAnswer {
  status: number;
  stdout: string;
  stderr: string;
}

export class FrameError extends Error {}

/** Collects one request's bytes as they arrive: the call once whole, null until then. */
export class RequestReader {
  #chunks: Buffer[] = [];
  #length = 0;
  #want = REQUEST_HEADER;
  #envLength = -1;

  push(chunk: Buffer): CniCall | null {
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    if (this.#envLength < 0 && this.#length >= REQUEST_HEADER) {
      const head = Buffer.concat(this.#chunks);
      this.#chunks = [head];
      if (!head.subarray(0, 4).equals(REQUEST_MAGIC)) throw new FrameError('not a request frame');
      const envLength = head.readUInt32LE(4);
      const stdinLength = head.readUInt32LE(8);
      if (envLength > MAX_ENV_BYTES) {
        throw new FrameError(`the environment is larger than ${MAX_ENV_BYTES} bytes`);
      }
      if (stdinLength > MAX_STDIN_BYTES) {
        throw new FrameError(`stdin is larger than ${MAX_STDIN_BYTES} bytes`);
      }
      this.#envLength = envLength;
      this.#want = REQUEST_HEADER + envLength + stdinLength;
    }
    if (this.#envLength < 0 || this.#length < this.#want) return null;
    if (this.#length > this.#want) throw new FrameError('bytes past the end of the request');
    const frame = Buffer.concat(this.#chunks);
    const envEnd = REQUEST_HEADER + this.#envLength;
    return {
      env: parseEnvironment(frame.subarray(REQUEST_HEADER, envEnd)),
      stdin: frame.subarray(envEnd).toString('utf8'),
    };
  }
}

/** The CNI_* variables; anything else, or a malformed entry, refuses the frame. */
function parseEnvironment(bytes: Buffer): CniEnvironment {
  const env: Record<string, string> = {};
  if (bytes.length === 0) return env;
  if (bytes[bytes.length - 1] !== 0) throw new FrameError('the environment is not NUL-terminated');
  for (const entry of bytes.subarray(0, -1).toString('utf8').split('\0')) {
    const equals = entry.indexOf('=');
    const key = entry.slice(0, equals);
    if (equals < 0 || !/^CNI_[A-Z_]+$/.test(key)) {
      throw new FrameError('the environment holds an entry that is not CNI_KEY=VALUE');
    }
    env[key] = entry.slice(equals + 1);
  }
  return env;
}

export function encodeRequest(call: CniCall): Buffer {
  const env = Buffer.from(
    Object.entries(call.env)
      .filter((entry): entry is [string, string] => entry[1] !== undefined)
      .map(([key, value]) => `${key}=${value}\0`)
      .join(''),
  );
  const stdin = Buffer.from(call.stdin);
  const header = Buffer.alloc(REQUEST_HEADER);
  REQUEST_MAGIC.copy(header);
  header.writeUInt32LE(env.length, 4);
  header.writeUInt32LE(stdin.length, 8);
  return Buffer.concat([header, env, stdin]);
}

export function encodeAnswer(answer: CniAnswer): Buffer {
  const stdout = Buffer.from(answer.stdout);
  // A log longer than the shim takes is cut, not refused: the answer matters more.
  const stderr = Buffer.from(answer.stderr).subarray(0, MAX_STDERR_BYTES);
  if (stdout.length > MAX_STDOUT_BYTES) throw new FrameError('stdout is larger than the frame');
  const header = Buffer.alloc(ANSWER_HEADER);
  ANSWER_MAGIC.copy(header);
  header.writeUInt32LE(answer.status & 0xff, 4);
  header.writeUInt32LE(stdout.length, 8);
  header.writeUInt32LE(stderr.length, 12);
  return Buffer.concat([header, stdout, stderr]);
}

/** An answer frame, whole (the tests' and benchmarks' side of the shim). */
export function decodeAnswer(frame: Buffer): CniAnswer {
  if (frame.length < ANSWER_HEADER || !frame.subarray(0, 4).equals(ANSWER_MAGIC)) {
    throw new FrameError('not an answer frame');
  }
  const outEnd = ANSWER_HEADER + frame.readUInt32LE(8);
  const errEnd = outEnd + frame.readUInt32LE(12);
  if (errEnd !== frame.length) throw new FrameError('the answer frame has the wrong length');
  return {
    status: frame.readUInt32LE(4),
    stdout: frame.subarray(ANSWER_HEADER, outEnd).toString('utf8'),
    stderr: frame.subarray(outEnd, errEnd).toString('utf8'),
  };
}
