/** The guard: its class, configuration, events, fight policy and the parts tests open it with. */
export { FlannelGuard } from './guard';
export {
  describeChecksumErrors,
  describeChecksumSender,
  describeChecksumSenders,
} from './checksum-errors';
export { guardConfig } from './config';
export type { FlannelGuardOptions, GuardConfig } from './config';
export type { GuardClock, GuardMonitor } from './seams';
export type * from './events';

export { openGuardParts, userNamespaceMapping, type GuardInternals } from './parts';
