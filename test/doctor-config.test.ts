/**
 * The doctor's configuration reading without a kernel in the loop: systemd's ini syntax and
 * globs, conf-file precedence and masking under a root, NetworkManager's configuration merge
 * and device specs, udev rules that touch the device - each asserted on the verdict the check
 * gives. (What udevd itself does with .link files is compared in doctor-udevd.test.ts.)
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { fixCommands } from '../lib/doctor/check-types';
import {
  checkLinkFiles,
  checkNetworkManager,
  networkManagerDropIn,
  checkUdevRules,
  flannelLinkFileContent,
} from '../lib/doctor/config-checks';
import { kernelAffectedByRandomFully } from '../lib/doctor/offload-checks';
import { FsRoot, NETWORK_DIRS } from '../lib/core/fsroot';
import { fnmatch, nmGlob, udevMatch } from '../lib/core/glob';
import { parseKeyFile, parseSystemdIni, splitNmList, splitWords } from '../lib/core/ini';
import {
  compareVersions,
  evaluateLinkFiles,
  loadLinkFiles,
  testPatterns,
  type HostFacts,
} from '../lib/udev/link-files';
import { loadNetworkManager, matchDeviceSpecs } from '../lib/doctor/networkmanager';
import { loadRules, rulesTouching } from '../lib/doctor/udev-rules';
import { FLANNEL_1 } from './support/link-oracle';
import { registerSyncCleanup, tempDirPrefix } from './support/netns';

const FLANNEL = FLANNEL_1;
const HOST: HostFacts = {
  hostname: 'node-a',
  machineId: '0123456789abcdef0123456789abcdef',
  kernelRelease: '6.1.0-18-amd64',
  architecture: 'x86-64',
  kernelCommandLine: 'BOOT_IMAGE=/vmlinuz root=/dev/sda1 net.ifnames=0 quiet',
};

function makeRoot(files: Record<string, string | { symlink: string }>): FsRoot {
  const root = mkdtempSync(tempDirPrefix('croot'));
  registerSyncCleanup(() => rmSync(root, { recursive: true, force: true }));
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    if (typeof content === 'string') writeFileSync(join(root, path), content);
    else symlinkSync(content.symlink, join(root, path));
  }
  return new FsRoot(root);
}

const DEFAULT_LINK =
  '[Match]\nOriginalName=*\n\n[Link]\nNamePolicy=keep kernel database onboard slot path\nMACAddressPolicy=persistent\n';

describe('doctor: configuration syntax', function () {
  it('fnmatch: *, ?, brackets with ranges and negation, escapes; udev alternatives; NM globs', function () {
    assert.ok(fnmatch('flannel*', 'flannel.1'));
    assert.ok(fnmatch('flannel.?', 'flannel.1'));
    assert.ok(!fnmatch('flannel.?', 'flannel.10'));
    assert.ok(fnmatch('flann[a-f]l.[0-9]', 'flannel.7'));
    assert.ok(!fnmatch('flann[!e]l.1', 'flannel.1'));
    assert.ok(fnmatch('flann[^x]l.1', 'flannel.1'));
    assert.ok(fnmatch('a\\*b', 'a*b'));
    assert.ok(!fnmatch('a\\*b', 'axb'));
    assert.ok(fnmatch('[]x]', ']'));
    assert.ok(!fnmatch('flannel', 'flannel.1'));
    assert.ok(udevMatch('eth*|flannel*', 'flannel.1'));
    assert.ok(!udevMatch('eth*|cni*', 'flannel.1'));
    assert.ok(nmGlob('flannel*', 'flannel.1'));
    assert.ok(!nmGlob('flannel[.]1', 'flannel.1'), 'NetworkManager has no ranges');
  });

  it('systemd ini: comments, sections, trimmed keys and values, continuation lines (skipping comments)', function () {
    const document = parseSystemdIni(
      '# comment\n; also\n[Match]\n  OriginalName = flannel* \\\n# inside\n   eth0\nbroken line\n[Link]\nMACAddressPolicy=none\\\n',
    );
    assert.deepEqual(
      document.entries.map((e) => [e.section, e.key, e.value.replace(/\s+/g, ' '), e.line]),
      [
        ['Match', 'OriginalName', 'flannel* eth0', 4],
        ['Link', 'MACAddressPolicy', 'none', 9],
      ],
    );
    assert.equal(document.problems.length, 1);
    assert.deepEqual(splitWords(`a "b c" 'd' e\\ f`, false), ['a', 'b c', 'd', 'e f']);
  });

  it('NetworkManager key files: list operators and escaped separators', function () {
    const document = parseKeyFile(
      '[keyfile]\nunmanaged-devices+=interface-name:a\\;b;mac:00:11:22:33:44:55\n',
    );
    assert.deepEqual(
      document.entries.map((e) => [e.key, e.op]),
      [['unmanaged-devices', '+=']],
    );
    assert.deepEqual(splitNmList(document.entries[0]?.value ?? ''), [
      'interface-name:a;b',
      'mac:00:11:22:33:44:55',
    ]);
  });

  it('[Match] lists: positive and negated patterns, an unknown value', function () {
    assert.equal(testPatterns([], 'x'), true);
    assert.equal(testPatterns(['flannel*'], 'flannel.1'), true);
    assert.equal(testPatterns(['!flannel*'], 'flannel.1'), false);
    assert.equal(testPatterns(['!eth*'], 'flannel.1'), true);
    assert.equal(
      testPatterns(['!eth*', 'veth*'], 'flannel.1'),
      false,
      'a positive rule must match',
    );
    assert.equal(
      testPatterns(['*'], null),
      false,
      'no value (no ID_PATH) matches no positive glob',
    );
    assert.equal(testPatterns(['!*'], null), true);
  });

  it('kernel versions: strverscmp-like order; 5.7 and older are affected by the --random-fully bug', function () {
    assert.ok(compareVersions('5.4.0-42-generic', '5.7') < 0);
    assert.ok(compareVersions('5.10.0', '5.7') > 0);
    assert.equal(kernelAffectedByRandomFully('4.19.53-53.lts2018'), true);
    assert.equal(kernelAffectedByRandomFully('5.7.0'), true);
    assert.equal(kernelAffectedByRandomFully('5.8.1'), false);
    assert.equal(kernelAffectedByRandomFully('6.1.0-18-amd64'), false);
  });
});

describe('doctor: the commands fix lines quote', function () {
  it('aim at the namespace and root examined, never the host by omission', function () {
    const host = fixCommands(undefined);
    assert.equal(host.ip('link set flannel.1 up'), 'ip link set flannel.1 up');
    assert.equal(host.guard('doctor', '--fix'), 'flannel-guard doctor --fix');
    const named = fixCommands('node1', '/srv/root');
    assert.equal(named.ip('link set flannel.1 up'), 'ip -n node1 link set flannel.1 up');
    assert.equal(
      named.ethtool('-K flannel.1 tx-checksum-ip-generic off'),
      'ip netns exec node1 ethtool -K flannel.1 tx-checksum-ip-generic off',
    );
    assert.equal(
      named.guard('doctor', '--fix'),
      'flannel-guard doctor --root /srv/root --netns node1 --fix',
    );
    assert.equal(named.guard('watch'), 'flannel-guard watch --netns node1');
    const path = fixCommands('/proc/42/ns/net');
    assert.equal(path.ip('link set x up'), 'nsenter --net=/proc/42/ns/net ip link set x up');
    assert.equal(path.ethtool('-k x'), 'nsenter --net=/proc/42/ns/net ethtool -k x');
    // A name a shell would split or expand is quoted.
    assert.equal(fixCommands("a b'c").ip('x'), `ip -n 'a b'\\''c' x`);
  });
});

describe('doctor: .link files under a root', function () {
  it('precedence: /etc over /run over /usr/local/lib over /usr/lib over /lib; /lib -> usr/lib is one directory', function () {
    const fs = makeRoot({
      '/usr/lib/systemd/network/10-a.link': 'usr',
      '/run/systemd/network/10-a.link': 'run',
      '/etc/systemd/network/10-a.link': 'etc',
      '/usr/local/lib/systemd/network/20-b.link': 'local',
      '/usr/lib/systemd/network/20-b.link': 'usr',
      '/usr/lib/systemd/network/.hidden.link': 'hidden',
      '/usr/lib/systemd/network/30-c.linkx': 'other suffix',
      '/lib': { symlink: 'usr/lib' },
    });
    const files = fs.confFiles(NETWORK_DIRS, '.link');
    assert.deepEqual(
      files.map((f) => [f.name, f.path, f.shadows]),
      [
        [
          '10-a.link',
          '/etc/systemd/network/10-a.link',
          ['/run/systemd/network/10-a.link', '/usr/lib/systemd/network/10-a.link'],
        ],
        [
          '20-b.link',
          '/usr/local/lib/systemd/network/20-b.link',
          ['/usr/lib/systemd/network/20-b.link'],
        ],
      ],
    );
  });

  it('a split /lib is read after /usr/lib; masking by /dev/null (absolute or relative link) and by an empty file', function () {
    const fs = makeRoot({
      '/lib/systemd/network/99-default.link': DEFAULT_LINK,
      '/etc/systemd/network/99-default.link': { symlink: '/dev/null' },
      '/lib/systemd/network/50-x.link': DEFAULT_LINK,
      '/run/systemd/network/50-x.link': '',
      '/lib/systemd/network/60-y.link': DEFAULT_LINK,
      '/etc/systemd/network/60-y.link': { symlink: '../../../dev/null' },
    });
    const files = fs.confFiles(NETWORK_DIRS, '.link');
    assert.deepEqual(
      files.map((f) => [f.name, f.masked]),
      [
        ['50-x.link', true],
        ['60-y.link', true],
        ['99-default.link', true],
      ],
    );
    const result = checkLinkFiles(evaluateLinkFiles(loadLinkFiles(fs), FLANNEL, HOST));
    assert.equal(result.verdict, 'ok');
    assert.match(result.summary, /no \.link file matches flannel\.1/);
  });

  it('the check fails on the shipped default, and its fix names the file to write', function () {
    const fs = makeRoot({ '/usr/lib/systemd/network/99-default.link': DEFAULT_LINK });
    const result = checkLinkFiles(evaluateLinkFiles(loadLinkFiles(fs), FLANNEL, HOST));
    assert.equal(result.verdict, 'fail');
    assert.match(
      result.summary,
      /99-default\.link applies to flannel\.1: MACAddressPolicy=persistent/,
    );
    assert.match(
      result.fix ?? '',
      /10-flannel\.link .*OriginalName=flannel\* .*MACAddressPolicy=none/,
    );
  });

  it('what cannot be known here (MACAddress=, Property=, Virtualization=) makes a rewriting file a warning', function () {
    for (const match of [
      'MACAddress=0e:00:00:00:00:01',
      'Property=ID_BUS=usb',
      'Virtualization=vm',
    ]) {
      const fs = makeRoot({
        '/usr/lib/systemd/network/99-default.link': DEFAULT_LINK,
        '/etc/systemd/network/10-x.link': `[Match]\nOriginalName=flannel*\n${match}\n[Link]\nMACAddressPolicy=none\n`,
        '/etc/systemd/network/05-x.link': `[Match]\n${match}\n[Link]\nMACAddressPolicy=persistent\n`,
      });
      const evaluation = evaluateLinkFiles(loadLinkFiles(fs), FLANNEL, HOST);
      assert.deepEqual(
        evaluation.possible.map((f) => f.name),
        ['05-x.link', '10-x.link'],
        match,
      );
      assert.equal(evaluation.applied?.name, '99-default.link');
      const result = checkLinkFiles(evaluation);
      assert.equal(result.verdict, 'fail', 'the default still applies when neither matches');
    }
    const fs = makeRoot({
      '/etc/systemd/network/05-x.link':
        '[Match]\nProperty=ID_BUS=usb\n[Link]\nMACAddressPolicy=persistent\n',
      '/etc/systemd/network/10-flannel.link':
        '[Match]\nOriginalName=flannel*\n[Link]\nMACAddressPolicy=none\n',
    });
    const result = checkLinkFiles(evaluateLinkFiles(loadLinkFiles(fs), FLANNEL, HOST));
    assert.equal(result.verdict, 'warn');
    assert.match(result.summary, /05-x\.link may apply to flannel\.1 and would rewrite its MAC/);
  });

  it('conditions: Host= by name or machine id, KernelCommandLine=, KernelVersion=, Architecture=, negation, reset', function () {
    const cases: [string, 'yes' | 'no'][] = [
      ['Host=node-a', 'yes'],
      ['Host=node-*', 'yes'],
      ['Host=!node-a', 'no'],
      ['Host=0123456789abcdef0123456789abcdef', 'yes'],
      ['Host=ffffffffffffffffffffffffffffffff', 'no'],
      ['KernelCommandLine=net.ifnames', 'yes'],
      ['KernelCommandLine=net.ifnames=1', 'no'],
      ['KernelCommandLine=!quiet', 'no'],
      ['KernelVersion=>=6.1 <6.2', 'yes'],
      ['KernelVersion=5.*', 'no'],
      ['Architecture=x86-64', 'yes'],
      ['Architecture=arm64', 'no'],
      ['Host=other\nHost=', 'yes'],
    ];
    for (const [condition, expected] of cases) {
      const fs = makeRoot({
        '/etc/systemd/network/10-x.link': `[Match]\nOriginalName=flannel*\n${condition}\n[Link]\nMACAddressPolicy=none\n`,
      });
      const evaluation = evaluateLinkFiles(loadLinkFiles(fs), FLANNEL, HOST);
      assert.equal(evaluation.files[0]?.match.result, expected, condition);
    }
  });

  it('bad values are ignored as udev ignores them, with the reason in the evidence', function () {
    const fs = makeRoot({
      '/usr/lib/systemd/network/99-default.link': DEFAULT_LINK,
      '/etc/systemd/network/10-x.link':
        '[Match]\nOriginalName=flannel*\nOriginalName=waytoolonginterfacename\n[Link]\nMACAddressPolicy=bogus\nMACAddress=zz\n[Bogus]\nX=1\n',
      '/etc/systemd/network/20-y.link':
        '[Match]\nOriginalName=flannel*\n[Link]\nMACAddressPolicy=persistent\nMACAddress=0e:00:00:00:00:01\n',
    });
    const files = loadLinkFiles(fs);
    const x = files.find((f) => f.name === '10-x.link');
    assert.equal(x?.macAddressPolicy, undefined);
    assert.equal(x?.macAddress, undefined);
    assert.deepEqual(x?.match.originalName, ['flannel*']);
    assert.equal(x?.warnings.length, 4, x?.warnings.join('\n'));
    const y = files.find((f) => f.name === '20-y.link');
    assert.equal(y?.macAddress, undefined, 'MACAddress= is dropped with persistent');
    const result = checkLinkFiles(evaluateLinkFiles(files, FLANNEL, HOST));
    assert.equal(result.verdict, 'ok', '10-x.link applies and sets nothing');
    assert.ok(result.evidence.some((line) => /MACAddressPolicy=bogus is not valid/.test(line)));
  });

  it('the file --fix writes names the default globs as flannel*, custom ones as given', function () {
    assert.match(
      flannelLinkFileContent(['flannel.*', 'flannel-v6.*']),
      /^OriginalName=flannel\*$/m,
    );
    assert.match(flannelLinkFileContent(['vxlan0']), /^OriginalName=vxlan0$/m);
  });
});

describe('doctor: NetworkManager', function () {
  const verdict = (
    files: Record<string, string | { symlink: string }>,
    rules: Record<string, string> = {},
  ) => {
    const fs = makeRoot({ '/usr/sbin/NetworkManager': '#!/bin/sh\n', ...files, ...rules });
    return checkNetworkManager(
      loadNetworkManager(fs),
      FLANNEL,
      rulesTouching(loadRules(fs), FLANNEL),
    );
  };

  it('not installed: ok', function () {
    const result = checkNetworkManager(loadNetworkManager(makeRoot({})), FLANNEL, []);
    assert.equal(result.verdict, 'ok');
    assert.equal(result.summary, 'NetworkManager is not installed');
  });

  it('installed without an unmanaged mark: warn, with the fix sentence', function () {
    const result = verdict({
      '/etc/NetworkManager/NetworkManager.conf': '[main]\nplugins=ifupdown,keyfile\n',
    });
    assert.equal(result.verdict, 'warn');
    assert.match(
      result.fix ?? '',
      /99-flannel-guard\.conf with \[keyfile\] unmanaged-devices\+=interface-name:flannel\.\*;interface-name:flannel-v6\.\*/,
    );
  });

  describe('connection profiles (keyfiles)', function () {
    const CLONED = '02:42:ac:11:00:02';
    const conf = '/etc/NetworkManager/NetworkManager.conf';
    const layouts = {
      // As nmcli writes one for an existing device: interface-name and a cloned MAC, in /etc.
      etc: {
        [conf]: '[main]\nplugins=keyfile\n',
        '/etc/NetworkManager/system-connections/flannel.1.nmconnection': `[connection]\nid=flannel.1\nuuid=4e2f8c1a-6b0f-4d57-9b2c-3d1f8a6e7c10\ntype=vxlan\ninterface-name=flannel.1\n\n[ethernet]\ncloned-mac-address=${CLONED}\n\n[vxlan]\nid=1\nremote=192.0.2.1\n\n[ipv4]\nmethod=disabled\n`,
      },
      // A cloud image's in-memory profile in /run, legacy 802-3-ethernet, bound by [match] globs.
      run: {
        [conf]: '[main]\nplugins=keyfile\n',
        '/run/NetworkManager/system-connections/cloud-init-any.nmconnection':
          '[connection]\nid=cloud-init any\ntype=ethernet\n\n[match]\ninterface-name=flannel*;eth*;!cni0\n\n[802-3-ethernet]\ncloned-mac-address=preserve\n',
      },
      // A vendor profile in /usr/lib that sets the MAC, on a node that marks flannel unmanaged.
      usrUnmanaged: {
        [conf]: '[keyfile]\nunmanaged-devices=interface-name:flannel*\n',
        '/usr/lib/NetworkManager/system-connections/vendor-flannel':
          '[connection]\nid=vendor\ntype=vxlan\ninterface-name=flannel.1\nautoconnect=false\n\n[ethernet]\ncloned-mac-address=stable\n',
      },
    };

    it('/etc: a profile for flannel.1 with a cloned MAC fails, naming the file, line and key', function () {
      const result = verdict(layouts.etc);
      assert.equal(result.verdict, 'fail');
      const path = '/etc/NetworkManager/system-connections/flannel.1.nmconnection';
      assert.equal(
        result.summary,
        `NetworkManager manages flannel.1 and a profile sets its MAC (${path}:8 [ethernet] cloned-mac-address=${CLONED})`,
      );
      assert.ok(
        result.evidence.includes(
          `profile flannel.1 (${path}) is for flannel.1: ${path}:5 [connection] interface-name=flannel.1; sets its MAC: ${path}:8 [ethernet] cloned-mac-address=${CLONED}`,
        ),
        JSON.stringify(result.evidence),
      );
      assert.match(result.fix ?? '', new RegExp(`or delete ${path.replaceAll('.', '\\.')}\\.$`));
    });

    it('/run: a [match] glob binds the profile (a warning: preserve keeps the MAC); ! excludes', function () {
      const result = verdict(layouts.run);
      assert.equal(result.verdict, 'warn');
      assert.match(
        result.summary,
        /has a profile for it \(\/run\/NetworkManager\/system-connections\/cloud-init-any\.nmconnection\)/,
      );
      const other = checkNetworkManager(
        loadNetworkManager(
          makeRoot({
            '/usr/sbin/NetworkManager': '',
            '/run/NetworkManager/system-connections/x.nmconnection':
              '[connection]\ntype=ethernet\n[match]\ninterface-name=*;!flannel*\n[ethernet]\ncloned-mac-address=random\n',
          }),
        ),
        FLANNEL,
        [],
      );
      assert.equal(other.verdict, 'warn');
      assert.match(
        other.summary,
        /does not mark flannel\.1 unmanaged/,
        'not bound: excluded by !flannel*',
      );
    });

    it('/usr/lib: a profile on an unmanaged device is never activated (ok, and said)', function () {
      const result = verdict(layouts.usrUnmanaged);
      assert.equal(result.verdict, 'ok');
      assert.equal(
        result.summary,
        'NetworkManager leaves flannel.1 unmanaged: its profiles for it are never activated',
      );
      assert.ok(result.evidence.some((line) => line.endsWith('; autoconnect=false')));
    });

    it('profiles for other devices, unbound ones, backups and links out of the root are not read as its', function () {
      const root = mkdtempSync(tempDirPrefix('croot-outside'));
      registerSyncCleanup(() => rmSync(root, { recursive: true, force: true }));
      writeFileSync(
        join(root, 'evil.nmconnection'),
        `[connection]\ninterface-name=flannel.1\n[ethernet]\ncloned-mac-address=${CLONED}\n`,
      );
      const dir = '/etc/NetworkManager/system-connections';
      const result = verdict({
        [conf]: '[main]\n',
        [`${dir}/eth0.nmconnection`]: `[connection]\ninterface-name=eth0\n[ethernet]\ncloned-mac-address=${CLONED}\n`,
        [`${dir}/vxlan-new.nmconnection`]: `[connection]\ntype=vxlan\n[ethernet]\ncloned-mac-address=${CLONED}\n`,
        [`${dir}/flannel.1.nmconnection~`]: `[connection]\ninterface-name=flannel.1\n[ethernet]\ncloned-mac-address=${CLONED}\n`,
        [`${dir}/escape.nmconnection`]: {
          symlink: `../../../../../../../../..${root}/evil.nmconnection`,
        },
      });
      assert.equal(result.verdict, 'warn');
      assert.match(result.summary, /does not mark flannel\.1 unmanaged$/);
      assert.ok(
        !result.evidence.some((line) => line.includes('profile')),
        JSON.stringify(result.evidence),
      );
    });

    it('the drop-in --fix writes makes each layout ok', function () {
      const { path, content } = networkManagerDropIn(['flannel.*', 'flannel-v6.*']);
      assert.equal(path, '/etc/NetworkManager/conf.d/99-flannel-guard.conf');
      for (const [name, files] of Object.entries(layouts)) {
        assert.equal(verdict({ ...files, [path]: content }).verdict, 'ok', name);
      }
    });
  });

  it('[keyfile] unmanaged-devices with globs, except:, += across files, and /etc shadowing /usr/lib', function () {
    const nm = '/etc/NetworkManager/NetworkManager.conf';
    assert.equal(
      verdict({
        [nm]: '[keyfile]\nunmanaged-devices=interface-name:cali*;interface-name:flannel*\n',
      }).verdict,
      'ok',
    );
    assert.equal(
      verdict({
        [nm]: '[keyfile]\nunmanaged-devices=interface-name:flannel*,except:interface-name:flannel.1\n',
      }).verdict,
      'warn',
    );
    assert.equal(
      verdict({ [nm]: '[keyfile]\nunmanaged-devices=flannel.1\n' }).verdict,
      'ok',
      'a bare name',
    );
    assert.equal(
      verdict({ [nm]: '[keyfile]\nunmanaged-devices=flannel*\n' }).verdict,
      'warn',
      'a bare name is not a glob',
    );
    assert.equal(verdict({ [nm]: '[keyfile]\nunmanaged-devices=type:vxlan\n' }).verdict, 'ok');
    assert.equal(verdict({ [nm]: '[keyfile]\nunmanaged-devices=driver:vxlan\n' }).verdict, 'ok');
    // conf.d is read after NetworkManager.conf: a plain assignment there replaces the list ...
    assert.equal(
      verdict({
        [nm]: '[keyfile]\nunmanaged-devices=interface-name:flannel*\n',
        '/etc/NetworkManager/conf.d/90-x.conf':
          '[keyfile]\nunmanaged-devices=interface-name:eth1\n',
      }).verdict,
      'warn',
    );
    // ... and += appends to it.
    assert.equal(
      verdict({
        [nm]: '[keyfile]\nunmanaged-devices=interface-name:eth1\n',
        '/etc/NetworkManager/conf.d/90-x.conf':
          '[keyfile]\nunmanaged-devices+=interface-name:flannel*\n',
      }).verdict,
      'ok',
    );
    // A file of the same name in /etc hides the one in /usr/lib; [.config] enable=false skips a file.
    assert.equal(
      verdict({
        '/usr/lib/NetworkManager/conf.d/flannel.conf':
          '[keyfile]\nunmanaged-devices=interface-name:flannel*\n',
        '/etc/NetworkManager/conf.d/flannel.conf': '# emptied\n[main]\n',
      }).verdict,
      'warn',
    );
    assert.equal(
      verdict({
        '/run/NetworkManager/conf.d/flannel.conf':
          '[keyfile]\nunmanaged-devices=interface-name:flannel*\n[.config]\nenable=false\n',
      }).verdict,
      'warn',
    );
    assert.equal(
      verdict({
        '/run/NetworkManager/conf.d/flannel.conf':
          '[keyfile]\nunmanaged-devices=interface-name:flannel*\n',
      }).verdict,
      'ok',
    );
  });

  it('[device*] sections with match-device and managed=0, later files first', function () {
    assert.equal(
      verdict({
        '/etc/NetworkManager/conf.d/f.conf':
          '[device-flannel]\nmatch-device=interface-name:flannel*\nmanaged=0\n',
      }).verdict,
      'ok',
    );
    assert.equal(
      verdict({
        '/etc/NetworkManager/conf.d/f.conf':
          '[device-eth]\nmatch-device=interface-name:eth*\nmanaged=0\n',
      }).verdict,
      'warn',
    );
    assert.equal(
      verdict({
        '/etc/NetworkManager/conf.d/10-f.conf':
          '[device-flannel]\nmatch-device=interface-name:flannel*\nmanaged=0\n',
        '/etc/NetworkManager/conf.d/20-all.conf': '[device-all]\nmatch-device=*\nmanaged=1\n',
      }).verdict,
      'warn',
      'the later file wins',
    );
  });

  it('a udev rule setting NM_UNMANAGED=1 for the device counts', function () {
    const result = verdict(
      { '/etc/NetworkManager/NetworkManager.conf': '[main]\n' },
      {
        '/etc/udev/rules.d/90-flannel.rules':
          'SUBSYSTEM=="net", KERNEL=="flannel*", ENV{NM_UNMANAGED}="1"\n',
      },
    );
    assert.equal(result.verdict, 'ok');
    assert.ok(result.evidence.some((line) => /90-flannel\.rules:1 sets NM_UNMANAGED=1/.test(line)));
  });

  it('device specs: interface-name:=, ~, mac:, except: needs a qualified spec', function () {
    const device = { ...FLANNEL, mac: '0e:00:00:00:00:01' };
    assert.ok(matchDeviceSpecs(['interface-name:=flannel.1'], device));
    assert.ok(!matchDeviceSpecs(['interface-name:=flannel*'], device));
    assert.ok(matchDeviceSpecs(['interface-name:~flannel*'], device));
    assert.ok(matchDeviceSpecs(['mac:0E:00:00:00:00:01'], device));
    assert.ok(!matchDeviceSpecs(['*', 'except:interface-name:flannel.1'], device));
    assert.ok(
      matchDeviceSpecs(['*', 'except:flannel.1'], device),
      'an unqualified except: matches nothing',
    );
  });
});

describe('doctor: udev rules', function () {
  const check = (rules: Record<string, string | { symlink: string }>) => {
    const fs = makeRoot(rules);
    return checkUdevRules(FLANNEL, rulesTouching(loadRules(fs), FLANNEL));
  };

  it('a rule setting the address of flannel devices fails; a catch-all for every net device too', function () {
    const specific = check({
      '/etc/udev/rules.d/70-mac.rules':
        'ACTION=="add", SUBSYSTEM=="net", KERNEL=="flannel*", ATTR{address}="0e:00:00:00:00:99"\n',
    });
    assert.equal(specific.verdict, 'fail');
    assert.match(specific.fix ?? '', /70-mac\.rules:1/);
    const all = check({
      '/run/udev/rules.d/70-mac.rules':
        'SUBSYSTEM=="net", ACTION=="add", \\\n  RUN+="/sbin/ip link set dev %k address 0e:00:00:00:00:99"\n',
    });
    assert.equal(all.verdict, 'fail');
    assert.match(all.evidence[0] ?? '', /runs-mac-change/);
  });

  it('a rule that only may match (an unknown key) makes it a warning', function () {
    const result = check({
      '/etc/udev/rules.d/70-mac.rules':
        'SUBSYSTEM=="net", ATTR{dev_id}=="0x0", KERNEL=="flannel*", ATTR{address}="0e:00:00:00:00:99"\n',
    });
    assert.equal(result.verdict, 'warn');
  });

  it('rules for other devices, remove events, or masked files are ignored; the system rules are fine', function () {
    const result = check({
      '/etc/udev/rules.d/70-eth.rules':
        'SUBSYSTEM=="net", KERNEL=="eth*", ATTR{address}="0e:00:00:00:00:99"\n',
      '/etc/udev/rules.d/71-del.rules':
        'ACTION=="remove", KERNEL=="flannel*", RUN+="/bin/logger gone"\n',
      '/etc/udev/rules.d/72-not.rules': 'KERNEL!="flannel*", ATTR{address}="0e:00:00:00:00:99"\n',
      '/usr/lib/udev/rules.d/73-masked.rules':
        'KERNEL=="flannel*", ATTR{address}="0e:00:00:00:00:99"\n',
      '/etc/udev/rules.d/73-masked.rules': { symlink: '/dev/null' },
      '/usr/lib/udev/rules.d/99-systemd.rules':
        'SUBSYSTEM=="net", KERNEL!="lo", TAG+="systemd", ENV{SYSTEMD_ALIAS}+="/sys/subsystem/net/devices/$name"\n',
      '/usr/lib/udev/rules.d/80-net-setup-link.rules':
        'SUBSYSTEM!="net", GOTO="net_setup_link_end"\nIMPORT{builtin}="net_setup_link"\nNAME=="", ENV{ID_NET_NAME}!="", NAME="$env{ID_NET_NAME}"\nLABEL="net_setup_link_end"\n',
    });
    assert.equal(result.verdict, 'ok', JSON.stringify(result));
  });

  it('an ethtool -K or a rename on flannel devices warns', function () {
    const offload = check({
      '/etc/udev/rules.d/80-offload.rules':
        'ACTION=="add", ENV{INTERFACE}=="flannel.?", RUN+="/sbin/ethtool -K $name tx on"\n',
    });
    assert.equal(offload.verdict, 'warn');
    assert.match(offload.evidence.join('\n'), /runs-offload-change/);
    const rename = check({
      '/etc/udev/rules.d/80-name.rules': 'SUBSYSTEM=="net", ENV{DEVTYPE}=="vxlan", NAME="vx0"\n',
    });
    assert.equal(rename.verdict, 'warn');
  });
});
