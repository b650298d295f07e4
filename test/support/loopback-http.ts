/** A plain HTTP GET to a loopback endpoint (the guard's /metrics, /healthz, /readyz). */
import { request } from 'node:http';

export interface HttpAnswer {
  status: number;
  type: string;
  body: string;
}

export function httpGet(url: string, timeoutMs = 5000): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { timeout: timeoutMs }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => {
        resolve({
          status: response.statusCode ?? 0,
          type: response.headers['content-type'] ?? '',
          body,
        });
      });
      response.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}
