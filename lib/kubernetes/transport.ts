/**
 * The HTTP transport under client-node's API classes and the watch stream: every request has a
 * deadline, every body is read within a bound (responses, watch lines, error bodies), and
 * `close()` aborts whatever is in flight, so a hung or hostile API server never wedges the guard.
 */
import * as http from 'node:http';
import * as https from 'node:https';

import type { RequestContextLike } from './client-node';
import { type WatchEnd, type WatchStream, apiErrorFromStatus, transportError } from './api';

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Caps on what the API server may send. etcd refuses objects over 1.5 MiB, so
 * a Node, and a watch line carrying one, is far below these; anything longer
 * is hostile or broken and is dropped, never buffered.
 */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
export const MAX_WATCH_LINE_BYTES = 4 * 1024 * 1024;
/** An error body (a Status) is read up to this much; the rest is discarded. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

function tooLarge(subject: string, limit: number): Error {
  return Object.assign(new Error(`${subject} longer than ${limit} bytes: dropped`), {
    code: 'EMSGSIZE',
  });
}

/** Collects a body up to `limit` bytes: the chunks, and whether more arrived. */
class BoundedBody {
  readonly #chunks: Buffer[] = [];
  #length = 0;
  overflowed = false;

  constructor(readonly limit: number) {}

  /** False once the limit is passed (the chunk beyond it is not kept). */
  add(chunk: Buffer): boolean {
    if (this.#length + chunk.length > this.limit) {
      this.overflowed = true;
      return false;
    }
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    return true;
  }

  text(): string {
    return Buffer.concat(this.#chunks, this.#length).toString('utf8');
  }
}

function flattenHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return flat;
}

export class Transport {
  readonly #inflight = new Set<http.ClientRequest>();
  readonly #timeoutMs: number;
  #closed = false;

  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  get closed(): boolean {
    return this.#closed;
  }

  #open(context: RequestContextLike, body?: string): http.ClientRequest {
    if (this.#closed) throw new Error('the Kubernetes client is closed');
    const url = new URL(context.getUrl());
    const headers: Record<string, string | number> = { ...context.getHeaders() };
    if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
    const options: https.RequestOptions = { method: context.getHttpMethod(), headers };
    const agent = context.getAgent();
    if (agent) options.agent = agent;
    const request =
      url.protocol === 'https:' ? https.request(url, options) : http.request(url, options);
    this.#inflight.add(request);
    request.once('close', () => this.#inflight.delete(request));
    return request;
  }

  /** One request with a deadline; resolves with any HTTP answer, rejects without one. */
  send(context: RequestContextLike): Promise<RawResponse> {
    const rawBody = context.getBody();
    const body = typeof rawBody === 'string' ? rawBody : undefined;
    return new Promise((resolve, reject) => {
      let request: http.ClientRequest;
      try {
        request = this.#open(context, body);
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
        return;
      }
      const timer = setTimeout(() => {
        request.destroy(
          Object.assign(new Error(`no answer within ${this.#timeoutMs} ms`), {
            code: 'ETIMEDOUT',
          }),
        );
      }, this.#timeoutMs);
      request.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      request.once('response', (response) => {
        const body = new BoundedBody(MAX_RESPONSE_BYTES);
        response.on('data', (chunk: Buffer) => {
          if (!body.add(chunk)) {
            clearTimeout(timer);
            request.destroy();
            reject(tooLarge('a response', MAX_RESPONSE_BYTES));
          }
        });
        response.once('error', (error) => {
          clearTimeout(timer);
          reject(error);
        });
        response.once('end', () => {
          clearTimeout(timer);
          resolve({
            status: response.statusCode ?? 0,
            headers: flattenHeaders(response.headers),
            body: body.text(),
          });
        });
      });
      request.end(body);
    });
  }

  /**
   * A streaming GET whose body is read as JSON lines. A line longer than
   * MAX_WATCH_LINE_BYTES ends the stream with EMSGSIZE; only complete lines
   * count as activity, so a server dripping bytes still goes `stalled`.
   */
  stream(
    context: RequestContextLike,
    what: string,
    idleTimeoutMs: number,
    onLine: (line: string) => void,
  ): WatchStream {
    let resolveOpened: () => void = () => {};
    let rejectOpened: (error: Error) => void = () => {};
    let resolveEnded: (end: WatchEnd) => void = () => {};
    const opened = new Promise<void>((resolve, reject) => {
      resolveOpened = resolve;
      rejectOpened = reject;
    });
    // Never leave a rejection of `opened` unhandled: `ended` reports the same failure.
    opened.catch(() => undefined);
    const ended = new Promise<WatchEnd>((resolve) => {
      resolveEnded = resolve;
    });
    let settled = false;
    let aborted = false;
    let stalled = false;
    let idle: NodeJS.Timeout | undefined;
    let request: http.ClientRequest | undefined;
    const finish = (end: WatchEnd): void => {
      if (settled) return;
      settled = true;
      clearTimeout(idle);
      if (end.kind === 'error') rejectOpened(end.error);
      else rejectOpened(new Error(`${what}: ${end.kind}`));
      resolveEnded(end);
    };
    const armIdle = (): void => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        stalled = true;
        request?.destroy();
      }, idleTimeoutMs);
    };
    const endOf = (error: unknown): WatchEnd =>
      aborted
        ? { kind: 'aborted' }
        : stalled
          ? { kind: 'stalled' }
          : { kind: 'error', error: transportError(error, what) };
    try {
      request = this.#open(context);
    } catch (error) {
      finish({ kind: 'error', error: transportError(error, what) });
      return { opened, ended, abort: () => undefined };
    }
    armIdle();
    request.once('error', (error) => {
      finish(endOf(error));
    });
    request.once('response', (response) => {
      const status = response.statusCode ?? 0;
      response.once('error', (error) => {
        finish(endOf(error));
      });
      if (status !== 200) {
        const body = new BoundedBody(MAX_ERROR_BODY_BYTES);
        response.on('data', (chunk: Buffer) => body.add(chunk));
        response.once('end', () => {
          finish({ kind: 'error', error: apiErrorFromStatus(status, body.text(), what) });
        });
        return;
      }
      resolveOpened();
      armIdle();
      // The part of the current line received so far, as chunks: each byte is
      // scanned for a newline once, however the line is cut.
      let partial: Buffer[] = [];
      let partialBytes = 0;
      response.on('data', (chunk: Buffer) => {
        let start = 0;
        for (let newline = chunk.indexOf(10); newline >= 0; newline = chunk.indexOf(10, start)) {
          partial.push(chunk.subarray(start, newline));
          const line = Buffer.concat(partial, partialBytes + newline - start)
            .toString('utf8')
            .trim();
          partial = [];
          partialBytes = 0;
          start = newline + 1;
          armIdle();
          if (line !== '') onLine(line);
          if (settled) return;
        }
        partialBytes += chunk.length - start;
        if (partialBytes > MAX_WATCH_LINE_BYTES) {
          const error = tooLarge('a watch line', MAX_WATCH_LINE_BYTES);
          finish({ kind: 'error', error: transportError(error, what) });
          request.destroy();
          return;
        }
        if (start < chunk.length) partial.push(chunk.subarray(start));
      });
      // 'end': the server finished the chunked body. 'close' without it: the connection dropped.
      response.once('end', () => {
        finish({ kind: 'closed' });
      });
      response.once('close', () => {
        finish(
          endOf(
            Object.assign(new Error('connection closed in the middle of the stream'), {
              code: 'ECONNRESET',
            }),
          ),
        );
      });
    });
    request.end();
    return {
      opened,
      ended,
      abort: () => {
        if (settled) return;
        aborted = true;
        request.destroy();
      },
    };
  }

  close(): void {
    this.#closed = true;
    for (const request of this.#inflight) request.destroy();
    this.#inflight.clear();
  }
}
