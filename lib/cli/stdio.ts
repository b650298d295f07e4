/**
 * process.stdout and process.stderr, made on first use. Node creates each
 * stream lazily, and a pipe's stream loads node:net and the stream modules
 * (about 1 MiB resident): `watch` writes its lines through its own sink on
 * fd 1 and never needs them. A closed stream (`status | head -1`) ends that
 * output, never the program: without a listener, EPIPE would be an uncaught
 * exception.
 */
const quieted = new Set<'stdout' | 'stderr'>();

export function standardStream(name: 'stdout' | 'stderr'): NodeJS.WriteStream {
  const stream = process[name];
  if (!quieted.has(name)) {
    quieted.add(name);
    stream.on('error', () => undefined);
  }
  return stream;
}

export function writeOut(text: string): void {
  standardStream('stdout').write(text);
}

export function writeErr(text: string): void {
  standardStream('stderr').write(text);
}
