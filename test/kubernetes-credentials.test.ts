/**
 * How the client authenticates, against the fake API server over HTTPS
 * (test/support/fake-apiserver.ts, which accepts one bearer token and can
 * rotate it, ending open watches): every kubeconfig user a node agent meets
 * (token, client-go's `tokenFile`, exec plugins) works or is refused at start
 * with one line, and a 401 re-reads the credential source at once, so a
 * rotated token costs one refused request, not client-go's minute.
 * In-cluster configuration is the same token-file source (client-node's
 * in-cluster user names the service account's token file), checked here
 * through `credentialSource`; the real path under /var/run/secrets is not
 * written by tests.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { isSystemError } from '../lib/core/errors';
import { createKubernetesClient } from '../lib/kubernetes/client';
import { type KubernetesApi } from '../lib/kubernetes/api';
import {
  credentialSource,
  parseExecCredential,
  TokenFile,
  CredentialError,
} from '../lib/kubernetes/credentials';
import { KubernetesMacSource } from '../lib/kubernetes/source';
import { FakeApiServer, type RequestRecord } from './support/fake-apiserver';
import { tempDirPrefix, waitFor } from './support/netns';

const MAC_A = '5e:89:db:49:c6:a4';
const EXEC_V1 = 'client.authentication.k8s.io/v1';

function annotations(mac: string): Record<string, string> {
  return {
    'flannel.alpha.coreos.com/backend-type': 'vxlan',
    'flannel.alpha.coreos.com/backend-data': JSON.stringify({ VNI: 1, VtepMAC: mac }),
  };
}

/** Throws unless `make` rejects with one line of EINVAL matching `pattern`. */
async function refusedAtStart(make: () => Promise<unknown>, pattern: RegExp): Promise<void> {
  await assert.rejects(make, (error: unknown) => {
    assert.ok(isSystemError(error), String(error));
    assert.equal(error.code, 'EINVAL');
    assert.doesNotMatch(error.message, /\n/);
    assert.match(error.message, pattern);
    return true;
  });
}

describe('Kubernetes credentials', function () {
  let fake: FakeApiServer;
  let dir: string;
  const closers: { close(): void }[] = [];

  beforeEach(async function () {
    fake = await FakeApiServer.start('token-one');
    fake.addNode({ name: 'node1', annotations: annotations(MAC_A) });
    dir = mkdtempSync(tempDirPrefix('kube-cred'));
  });

  afterEach(async function () {
    for (const closer of closers.splice(0)) closer.close();
    await fake.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function client(user: string[]): Promise<KubernetesApi> {
    const kubeconfig = fake.writeKubeconfig(dir, 'kubeconfig', user);
    const api = await createKubernetesClient({ kubeconfig, requestTimeoutMs: 2000 });
    closers.push(api);
    return api;
  }

  function source(api: KubernetesApi): KubernetesMacSource {
    const s = new KubernetesMacSource({
      api,
      nodeName: 'node1',
      backoff: { initialMs: 50, maxMs: 400 },
    });
    closers.push(s);
    return s;
  }

  const refused = (): RequestRecord[] => fake.requests.filter((r) => r.status === 401);
  const answeredAfter = (at: number): RequestRecord[] =>
    fake.requests.filter((r) => r.status === 200 && r.at >= at);

  describe('tokenFile', function () {
    it('authenticates with the token in the file (relative to the kubeconfig, trimmed)', async function () {
      writeFileSync(join(dir, 'token'), 'token-one\n');
      const s = source(await client(['tokenFile: token']));
      const status = await s.waitForSync(5000);
      assert.equal(status.problem, null, status.message ?? '');
      assert.equal(s.desiredMac('flannel.1'), MAC_A);
      assert.deepEqual(refused(), []);
    });

    it('wins over token, as in client-go', async function () {
      writeFileSync(join(dir, 'token'), 'token-one');
      const s = source(await client(['token: stale', `tokenFile: ${join(dir, 'token')}`]));
      assert.equal((await s.waitForSync(5000)).problem, null);
      assert.deepEqual(refused(), []);
    });

    it('a rotation: the refused watch re-reads the file at once and is opened again, one 401', async function () {
      const tokenPath = join(dir, 'token');
      writeFileSync(tokenPath, 'token-one');
      const s = source(await client(['tokenFile: token']));
      assert.equal((await s.waitForSync(5000)).problem, null);
      await waitFor(() => fake.openWatches === 1, { timeoutMs: 5000, what: 'the watch' });
      writeFileSync(tokenPath, 'token-two');
      const rotatedAt = Date.now();
      fake.rotateToken('token-two');
      await waitFor(() => fake.openWatches === 1, {
        timeoutMs: 10_000,
        what: 'the watch opened again with the new token',
      });
      assert.ok(answeredAfter(rotatedAt).length > 0);
      assert.equal(refused().length, 1, 'one refused request');
      assert.equal(s.status().problem, null);
    });

    it('a rotation met by a write: the call is made once more with the re-read token', async function () {
      const tokenPath = join(dir, 'token');
      writeFileSync(tokenPath, 'token-one');
      const api = await client(['tokenFile: token']);
      await api.getNode('node1');
      writeFileSync(tokenPath, 'token-two');
      fake.rotateToken('token-two');
      const node = await api.patchNode('node1', { metadata: { labels: { rotated: 'yes' } } });
      assert.equal(node.metadata.name, 'node1');
      assert.deepEqual(
        fake.requests.map((r) => `${r.method} ${r.status}`),
        ['GET 200', 'PATCH 401', 'PATCH 200'],
      );
    });

    it('a token the server keeps refusing: one retry only when the file changed, then the 401', async function () {
      writeFileSync(join(dir, 'token'), 'token-one');
      const api = await client(['tokenFile: token']);
      fake.rotateToken('token-elsewhere');
      await assert.rejects(api.getNode('node1'), /401 Unauthorized/);
      assert.equal(refused().length, 1, 'the unchanged file is not retried');
      writeFileSync(join(dir, 'token'), 'token-three');
      await assert.rejects(api.getNode('node1'), /401 Unauthorized/);
      assert.equal(refused().length, 3, 'the changed file is retried once');
    });

    it('refused at start: missing, empty, a FIFO-like non-file, too large', async function () {
      await refusedAtStart(
        () => client(['tokenFile: missing']),
        /^EINVAL: option kubeconfig .*: token file .*missing: no such file$/,
      );
      writeFileSync(join(dir, 'empty'), ' \n');
      await refusedAtStart(
        () => client(['tokenFile: empty']),
        /token file .*empty: the file is empty$/,
      );
      await refusedAtStart(() => client([`tokenFile: ${dir}`]), /directory, not a file/);
      writeFileSync(join(dir, 'huge'), Buffer.alloc(70 * 1024, 0x41));
      await refusedAtStart(() => client(['tokenFile: huge']), /larger than 65536 bytes/);
    });

    it('a token file that disappears later: the last token is kept (as client-go does)', async function () {
      let now = 0;
      const path = join(dir, 'token');
      writeFileSync(path, 'first');
      const file = new TokenFile(path, () => now);
      rmSync(path);
      now = 61_000;
      assert.deepEqual(await file.current(), { token: 'first' });
      await assert.rejects(file.refused(), CredentialError);
      writeFileSync(path, 'second');
      assert.equal(await file.refused(), true);
      assert.deepEqual(await file.current(), { token: 'second' });
      assert.equal(await file.refused(), false, 'unchanged');
    });

    it('in-cluster: the service account token file is the same source', function () {
      const path = join(dir, 'sa-token');
      writeFileSync(path, 'sa');
      const source = credentialSource('sa', { tokenFile: path }, undefined, fake.url, false);
      assert.equal(source.kind, 'file');
    });
  });

  describe('exec plugins', function () {
    /** A plugin printing the token in `dir/exec-token`, logging each run and its exec info. */
    function plugin(): string[] {
      const script = join(dir, 'plugin.sh');
      writeFileSync(
        script,
        [
          '#!/bin/sh',
          'echo run >> "$PLUGIN_DIR/runs"',
          'printf "%s" "$KUBERNETES_EXEC_INFO" > "$PLUGIN_DIR/info"',
          `printf '{"apiVersion":"${EXEC_V1}","kind":"ExecCredential","status":{"token":"%s"}}' "$(cat "$PLUGIN_DIR/exec-token")"`,
          '',
        ].join('\n'),
      );
      chmodSync(script, 0o755);
      writeFileSync(join(dir, 'exec-token'), 'token-one');
      return [
        'exec:',
        `  apiVersion: ${EXEC_V1}`,
        '  command: ./plugin.sh',
        '  env:',
        '  - name: PLUGIN_DIR',
        `    value: ${dir}`,
      ];
    }
    const runs = (): number => readFileSync(join(dir, 'runs'), 'utf8').split('\n').length - 1;

    it('runs the plugin once (relative command, env given to it only, exec info), then reuses it', async function () {
      const api = await client(plugin());
      await api.getNode('node1');
      await api.getNode('node1');
      assert.equal(runs(), 1);
      assert.equal(process.env.PLUGIN_DIR, undefined, "the plugin's env stays the plugin's");
      assert.deepEqual(JSON.parse(readFileSync(join(dir, 'info'), 'utf8')), {
        kind: 'ExecCredential',
        apiVersion: EXEC_V1,
        spec: { interactive: false },
      });
    });

    it('a 401 runs the plugin again and the call is made once more', async function () {
      const api = await client(plugin());
      await api.getNode('node1');
      writeFileSync(join(dir, 'exec-token'), 'token-two');
      fake.rotateToken('token-two');
      await api.getNode('node1');
      assert.equal(runs(), 2);
      assert.equal(refused().length, 1);
    });

    it('a failing plugin: the source says unauthorized with its stderr, and recovers', async function () {
      const script = join(dir, 'plugin.sh');
      const user = plugin();
      const working = readFileSync(script, 'utf8');
      writeFileSync(script, '#!/bin/sh\necho "no credentials here" >&2\nexit 3\n');
      const s = source(await client(user));
      const status = await s.waitForSync(2000);
      assert.equal(status.problem, 'unauthorized');
      assert.match(status.message ?? '', /exec plugin .*plugin\.sh: exit 3: no credentials here/);
      writeFileSync(script, working);
      await waitFor(() => s.status().problem === null, { timeoutMs: 10_000, what: 'recovery' });
    });

    it('refused at start: interactive, no command, an unknown apiVersion', async function () {
      await refusedAtStart(
        () => client([...plugin(), '  interactiveMode: Always']),
        /needs a terminal \(interactiveMode Always\)/,
      );
      await refusedAtStart(
        () => client(['exec:', `  apiVersion: ${EXEC_V1}`]),
        /user guard: exec.command must be a non-empty string$/,
      );
      await refusedAtStart(
        () =>
          client(['exec:', '  apiVersion: client.authentication.k8s.io/v1alpha1', '  command: x']),
        /exec.apiVersion "client.authentication.k8s.io\/v1alpha1" is not one of/,
      );
    });

    it('parses ExecCredential output as client-go checks it', function () {
      const ok = (status: object): string =>
        JSON.stringify({ apiVersion: EXEC_V1, kind: 'ExecCredential', status });
      assert.deepEqual(parseExecCredential(ok({ token: 't' }), EXEC_V1, 'p'), {
        credential: { token: 't' },
        expiresAt: Number.POSITIVE_INFINITY,
      });
      assert.equal(
        parseExecCredential(
          ok({ token: 't', expirationTimestamp: '2030-01-01T00:00:00Z' }),
          EXEC_V1,
          'p',
        ).expiresAt,
        Date.parse('2030-01-01T00:00:00Z'),
      );
      assert.deepEqual(
        parseExecCredential(ok({ clientCertificateData: 'C', clientKeyData: 'K' }), EXEC_V1, 'p')
          .credential,
        { clientCertificate: 'C', clientKey: 'K' },
      );
      const bad: [string, RegExp][] = [
        ['not json', /not JSON/],
        [JSON.stringify({ kind: 'Other' }), /not an ExecCredential/],
        [
          JSON.stringify({
            kind: 'ExecCredential',
            apiVersion: 'client.authentication.k8s.io/v1beta1',
          }),
          /answered .*v1beta1, asked for .*v1$/,
        ],
        [JSON.stringify({ kind: 'ExecCredential', apiVersion: EXEC_V1 }), /has no status/],
        [ok({}), /neither a token nor a client certificate/],
        [ok({ clientCertificateData: 'C' }), /without a key/],
        [ok({ token: 't', expirationTimestamp: 'soon' }), /not a time/],
      ];
      for (const [output, pattern] of bad) {
        assert.throws(() => parseExecCredential(output, EXEC_V1, 'p'), pattern);
      }
    });

    it('a user with a client certificate runs no exec plugin (client-go)', function () {
      const exec = { apiVersion: EXEC_V1, command: 'never-run' };
      assert.equal(credentialSource('u', { exec }, undefined, fake.url, true).kind, 'none');
      assert.equal(credentialSource('u', { exec }, undefined, fake.url, false).kind, 'exec');
    });
  });

  it('refused at start: the auth-providers removed from client-go, naming their exec plugin', async function () {
    await refusedAtStart(
      () => client(['auth-provider:', '  name: gcp']),
      /auth-provider gcp was removed .* use its exec plugin \(gke-gcloud-auth-plugin\)$/,
    );
    await refusedAtStart(
      () => client(['auth-provider:', '  name: azure']),
      /auth-provider azure was removed .*\(kubelogin\)$/,
    );
  });
});
