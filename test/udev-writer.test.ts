/**
 * Naming the writer of a MAC: SipHash-2-4 against the paper's vectors, udev's persistent MAC
 * against values the real systemd-udevd 252 wrote (and, in the udev test bed, against every
 * rewrite it makes: test/writer-proof.test.ts), the attribution's rules, udev's database
 * records, and the view of a root that holds hostile files. No privileges.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { parseMachineId, siphash24, udevPersistentMac } from '../lib/udev/persistent-mac';
import { parseUdevDatabase, UdevView } from '../lib/udev/view';
import { attributeWriter, type WriterEvidence } from '../lib/udev/writer';
import { prng } from './support/prng';

// The reference implementation's vectors (vectors.h; the paper's appendix A): key 00..0f,
// messages 00, 00 01, ..., the output as its eight bytes.
const PAPER_KEY = Buffer.from([...Array(16).keys()]);
const PAPER_VECTORS: [number, string][] = [
  [0, '310e0edd47db6f72'],
  [1, 'fd67dc93c539f874'],
  [2, '5a4fa9d909806c0d'],
  [7, '37d1018bf50002ab'],
  [8, '6224939a79f5f593'],
  [15, 'e545be4961ca29a1'],
  [63, '724506eb4c328a95'],
];

// MACs the real systemd-udevd 252 (Debian 12) gave VXLAN devices in a test netns whose private
// /etc/machine-id held MACHINE_ID (recorded from /sys/class/net/NAME/address after udevadm settle).
const MACHINE_ID = '4f1b7c3a9e2d45c08b6a1f0e3d2c5b7a';
const UDEV_FLANNEL_1 = '8a:d3:b9:d4:81:b6';
const UDEVD_252: [string, string][] = [
  ['flannel.1', '8a:d3:b9:d4:81:b6'],
  ['flannel.42', 'e2:2e:d8:01:72:80'],
  ['flannel-v6.1', 'aa:2d:9a:58:bd:d9'],
  ['vxlan0', '06:b4:3e:18:88:de'],
  ['f', '1e:01:ec:b3:10:04'],
];

function evidence(overrides: Partial<WriterEvidence>): WriterEvidence {
  return {
    persistentMac: '8a:d3:b9:d4:81:b6',
    machineId: '/etc/machine-id',
    linkFile: '/usr/lib/systemd/network/99-default.link',
    linkFileFrom: 'configuration',
    policy: 'persistent',
    macAddress: null,
    mac: '8a:d3:b9:d4:81:b6',
    msSinceCreation: 4,
    addrAssignType: null,
    ...overrides,
  };
}

describe('udev persistent MACs', function () {
  it("SipHash-2-4 gives the paper's vectors", function () {
    for (const [length, expected] of PAPER_VECTORS) {
      const message = Buffer.from([...Array(length).keys()]);
      assert.equal(siphash24(PAPER_KEY, message).toString('hex'), expected, `${length} bytes`);
    }
    assert.throws(() => siphash24(Buffer.alloc(15), Buffer.alloc(0)), RangeError);
  });

  it('gives the MACs the real systemd-udevd 252 wrote', function () {
    for (const [name, mac] of UDEVD_252) assert.equal(udevPersistentMac(MACHINE_ID, name), mac);
    assert.equal(udevPersistentMac(MACHINE_ID.toUpperCase(), 'flannel.1'), UDEVD_252[0]?.[1]);
  });

  it('always gives a locally administered unicast MAC, distinct per name and machine (seeded)', function () {
    const random = prng(0x5eed);
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i += 1) {
      const id = [...Array(32)].map(() => Math.floor(random() * 16).toString(16)).join('');
      if (parseMachineId(id) === null) continue;
      const name = `flannel.${Math.floor(random() * 4096)}`;
      const mac = udevPersistentMac(id, name);
      assert.match(mac, /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/);
      const first = parseInt(mac.slice(0, 2), 16);
      assert.equal(first & 0x01, 0, `${mac}: unicast`);
      assert.equal(first & 0x02, 0x02, `${mac}: locally administered`);
      seen.add(`${id}|${name}|${mac}`);
    }
    assert.equal(new Set([...seen].map((s) => s.split('|')[2])).size, seen.size);
  });

  it('accepts only real machine-ids', function () {
    assert.equal(parseMachineId(`${MACHINE_ID}\n`), MACHINE_ID);
    for (const bad of ['', '0'.repeat(32), 'x'.repeat(32), MACHINE_ID.slice(1), `${MACHINE_ID}0`]) {
      assert.equal(parseMachineId(bad), null, JSON.stringify(bad));
      assert.throws(() => udevPersistentMac(bad, 'flannel.1'), RangeError);
    }
  });
});

describe('attributeWriter', function () {
  it("names udev's persistent policy only for udev's exact value", function () {
    const proven = attributeWriter(evidence({}));
    assert.equal(proven.writer, 'udev-persistent-policy');
    assert.match(proven.detail, /99-default\.link.*siphash24/);
    const other = attributeWriter(evidence({ mac: '8a:d3:b9:d4:81:b7', addrAssignType: 3 }));
    assert.equal(other.writer, 'another-writer');
    assert.match(
      other.detail,
      /not udev's persistent value 8a:d3:b9:d4:81:b6.*4\.0 ms.*addr_assign_type 3/,
    );
  });

  it("udev's value under a .link file whose policy is not persistent: another writer, saying so", function () {
    for (const policy of ['none', 'random'] as const) {
      const copied = attributeWriter(
        evidence({ policy, linkFile: '/etc/systemd/network/10-f.link' }),
      );
      assert.equal(copied.writer, 'another-writer', policy);
      assert.match(
        copied.detail,
        new RegExp(
          `udev's persistent value, but the \\.link file udev applies .*10-f\\.link.* says MACAddressPolicy=${policy}`,
        ),
      );
    }
  });

  it("names udev's MACAddress= only when no generating policy overrides it", function () {
    const fixed = '02:00:00:00:00:99';
    const base = { mac: fixed, macAddress: fixed, linkFile: '/etc/systemd/network/10-f.link' };
    assert.equal(attributeWriter(evidence({ ...base, policy: null })).writer, 'udev-static-mac');
    assert.equal(attributeWriter(evidence({ ...base, policy: 'none' })).writer, 'udev-static-mac');
    for (const policy of ['persistent', 'random'] as const) {
      assert.equal(attributeWriter(evidence({ ...base, policy })).writer, 'another-writer', policy);
    }
    // Proven without the machine-id too: the file says it.
    const noId = evidence({ ...base, policy: null, persistentMac: null, machineId: 'missing' });
    assert.equal(attributeWriter(noId).writer, 'udev-static-mac');
  });

  it('says unknown, never another writer, when udev cannot be ruled out', function () {
    const unknown = attributeWriter(evidence({ persistentMac: null, machineId: '/x missing' }));
    assert.equal(unknown.writer, 'unknown');
    assert.match(unknown.detail, /machine-id is unknown/);
  });
});

describe('UdevView', function () {
  let root: string;
  beforeEach(function () {
    root = mkdtempSync(join(tmpdir(), 'fg-udev-view-'));
    for (const dir of ['etc', 'run/udev/data', 'etc/systemd/network', 'usr/lib/systemd/network']) {
      mkdirSync(join(root, dir), { recursive: true });
    }
  });
  afterEach(function () {
    rmSync(root, { recursive: true, force: true });
  });

  it('parses the E: properties of a database record', function () {
    const record =
      'I:363212507\nE:ID_NET_DRIVER=vxlan\nE:ID_NET_LINK_FILE=/usr/lib/systemd/network/99-default.link\nE:X=a=b\nG:systemd\nV:1\n';
    const properties = parseUdevDatabase(record);
    assert.equal(properties.get('ID_NET_LINK_FILE'), '/usr/lib/systemd/network/99-default.link');
    assert.equal(properties.get('X'), 'a=b');
    assert.equal(properties.size, 3);
  });

  it("reads udev's value, the applied file from the configuration, then from the database", function () {
    writeFileSync(join(root, 'etc/machine-id'), `${MACHINE_ID}\n`);
    writeFileSync(
      join(root, 'usr/lib/systemd/network/99-default.link'),
      '[Match]\nOriginalName=*\n\n[Link]\nMACAddressPolicy=persistent\n',
    );
    writeFileSync(
      join(root, 'etc/systemd/network/10-flannel.link'),
      '[Match]\nOriginalName=flannel.9\n\n[Link]\nMACAddress=02:00:00:00:00:99\n',
    );
    const view = UdevView.open(root);
    assert.equal(view.machineId, MACHINE_ID);
    const configured = view.expect('flannel.1', 7, UDEV_FLANNEL_1);
    assert.equal(configured.persistentMac, '8a:d3:b9:d4:81:b6');
    assert.equal(configured.machineId, join(root, 'etc/machine-id'));
    assert.deepEqual(
      [configured.linkFile, configured.linkFileFrom, configured.policy],
      ['/usr/lib/systemd/network/99-default.link', 'configuration', 'persistent'],
    );
    const fixed = view.expect('flannel.9', 8, '02:00:00:00:00:99');
    assert.deepEqual(
      [fixed.linkFile, fixed.macAddress],
      ['/etc/systemd/network/10-flannel.link', '02:00:00:00:00:99'],
    );
    // Index 7 in another namespace: the record names another device and is not evidence.
    writeFileSync(
      join(root, 'run/udev/data/n7'),
      'E:ID_NET_LINK_FILE=/etc/systemd/network/10-flannel.link\nE:ID_NET_NAME=eth0\n',
    );
    assert.equal(view.expect('flannel.1', 7, UDEV_FLANNEL_1).linkFileFrom, 'configuration');
    writeFileSync(
      join(root, 'run/udev/data/n7'),
      'E:ID_NET_LINK_FILE=/etc/systemd/network/10-flannel.link\nE:ID_NET_NAME=flannel.1\n',
    );
    const recorded = view.expect('flannel.1', 7, UDEV_FLANNEL_1);
    assert.deepEqual(
      [recorded.linkFile, recorded.linkFileFrom, recorded.macAddress],
      ['/etc/systemd/network/10-flannel.link', 'udev-database', '02:00:00:00:00:99'],
    );
    // A write of any other value is not udev's: its database is not even read.
    assert.equal(view.expect('flannel.1', 7, '02:00:00:00:00:01').linkFileFrom, 'configuration');
  });

  it('never hangs or follows a link out of the root: a FIFO machine-id, a database link to /dev/zero, an outside link', function () {
    execFileSync('mkfifo', [join(root, 'etc/machine-id')]);
    symlinkSync('/dev/zero', join(root, 'run/udev/data/n7'));
    // The host's own default policy (udev is installed here) must not be read through the link.
    assert.ok(existsSync('/usr/lib/systemd/network/99-default.link'));
    symlinkSync(
      '/usr/lib/systemd/network/99-default.link',
      join(root, 'etc/systemd/network/x.link'),
    );
    const view = UdevView.open(root);
    assert.equal(view.machineId, null);
    const expectation = view.expect('flannel.1', 7, '8a:d3:b9:d4:81:b6');
    assert.equal(expectation.persistentMac, null);
    assert.match(expectation.machineId, /missing or not a machine-id/);
    assert.deepEqual(
      [expectation.linkFile, expectation.linkFileFrom, expectation.policy],
      [null, null, null],
    );
  });
});
