import { describe } from 'vitest';
import { checkpointStoreContract } from '../contract/checkpoint-store.contract.js';
import { leaseStoreContract } from '../contract/lease-store.contract.js';
import { memoryStoreEnv } from '../contract/store-env.js';

describe('MemoryLeaseStore', () => {
  leaseStoreContract(memoryStoreEnv());
});

describe('MemoryCheckpointStore', () => {
  checkpointStoreContract(memoryStoreEnv());
});
