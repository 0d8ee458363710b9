/**
 * The client side of Vigil's logs on NATS JetStream that both the runtime (`service/`) and the
 * control plane need: how to connect, and following `CONTROL` into rule sets. It imports only the
 * rules core and the protocol layer, so neither of its users reaches into the other.
 */
export { natsConnection, type NatsSettings } from './connection.js';
export { ControlFollower, type ControlEvent } from './control-follower.js';
export {
  jetStreamControl,
  type ControlReader,
  type ControlRecord,
  type ControlStream,
} from './control-stream.js';
