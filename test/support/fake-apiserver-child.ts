/**
 * The fake API server as a process of its own, so that it can run inside a
 * test network namespace (next to a guard run the way a hostNetwork pod runs).
 *
 *   node fake-apiserver-child.js DIR NODE_SPEC_JSON
 *
 * Starts FakeApiServer on 127.0.0.1 (of the namespace it runs in), adds the
 * Node, writes a kubeconfig into DIR and prints one JSON line
 * {"port":N,"kubeconfig":PATH}. On SIGTERM it prints one more JSON line with
 * everything it saw - {"requests":[...],"events":[...],"nodes":[...]} (events: both
 * groups') - and exits.
 */
import { FakeApiServer, type NodeSpec } from './fake-apiserver';

async function main(): Promise<void> {
  const [dir, specText] = process.argv.slice(2);
  if (dir === undefined || specText === undefined) {
    throw new Error('usage: fake-apiserver-child DIR NODE_SPEC_JSON');
  }
  const spec = JSON.parse(specText) as NodeSpec;
  const fake = await FakeApiServer.start();
  fake.addNode(spec);
  const kubeconfig = fake.writeKubeconfig(dir);
  process.stdout.write(`${JSON.stringify({ port: fake.port, kubeconfig })}\n`);
  process.once('SIGTERM', () => {
    const dump = {
      requests: fake.requests,
      events: [...fake.eventsV1(), ...fake.events()],
      nodes: [fake.node(spec.name)],
    };
    process.stdout.write(`${JSON.stringify(dump)}\n`, () => {
      void fake.close().then(() => process.exit(0));
    });
  });
}

main().catch((error: unknown) => {
  process.stderr.write(
    `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
