// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { CODE_FOLDERS } from './scripts/source-files.mjs';

/** Packages and Node modules that do I/O: `rules/` is pure and may import none of them. */
const ioModules = [
  '@nats-io/*',
  'ioredis',
  'express',
  'prom-client',
  'node:fs',
  'node:fs/*',
  'node:net',
  'node:http',
  'node:https',
  'node:child_process',
  'node:worker_threads',
  'fs',
  'net',
  'http',
  'child_process',
];

/** The code folders, lowest first: each may import only those below it, through their index. */
const LAYERS = CODE_FOLDERS;

/**
 * Import restrictions of one folder: the folders in `below` through their public index only
 * (plus the files in `extra`), nothing of the others (folders above it, tools, benchmarks, tests).
 */
function layer(folder, below, extra = []) {
  const others = [
    ...LAYERS.filter((l) => l !== folder && !below.includes(l)),
    'scripts',
    'bench',
    'test',
  ];
  return [
    {
      group: [...others.map((o) => `**/${o}/**`), ...extra.map((e) => `!**/${e}`)],
      message: `${folder}/ may import only ${[...below, ...extra].join(', ')} (rules <- protocol <- jetstream <- service <- control-plane <- app).`,
    },
    ...below.map((b) => ({
      group: [`**/${b}/*`, `!**/${b}/index.js`],
      message: `Import ${b}/ through its public index.`,
    })),
  ];
}

export default tseslint.config(
  { ignores: ['node_modules/**', '.vigil/**', '.scratch/**', 'coverage/**', 'dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      ecmaVersion: 2023,
      sourceType: 'module',
      globals: { console: 'readonly', process: 'readonly' },
    },
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: 'TSEnumDeclaration', message: 'Use a const object with `as const`.' },
        { selector: 'ExportDefaultDeclaration', message: 'Named exports only.' },
      ],
      'no-new-func': 'error',
      'no-eval': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_' },
      ],
    },
  },
  {
    files: ['rules/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ioModules, message: 'rules/ does no I/O (DESIGN §2).' },
            {
              group: ['**/protocol/**', '**/service/**', '**/control-plane/**', '**/bench/**'],
              message: 'rules/ imports nothing of ours.',
            },
          ],
        },
      ],
    },
  },
  {
    // A promise nobody awaits loses its rejection: say `void` where that is meant.
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true } },
    rules: { '@typescript-eslint/no-floating-promises': 'error' },
  },
  {
    files: ['protocol/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ioModules,
              message: 'protocol/ does no I/O: it describes the logs, service/ reads them.',
            },
            ...layer('protocol', ['rules']),
          ],
        },
      ],
    },
  },
  ...[
    { folder: 'jetstream', below: ['rules', 'protocol'] },
    { folder: 'service', below: ['rules', 'protocol', 'jetstream'] },
    // The control plane sees the service through one interface only (service/status.ts).
    {
      folder: 'control-plane',
      below: ['rules', 'protocol', 'jetstream'],
      extra: ['service/status.js'],
    },
    { folder: 'app', below: ['rules', 'protocol', 'jetstream', 'service', 'control-plane'] },
  ].map(({ folder, below, extra }) => ({
    files: [`${folder}/**/*.ts`],
    rules: {
      'no-restricted-imports': ['error', { patterns: layer(folder, below, extra) }],
    },
  })),
  {
    // Tool configuration files are loaded by their tools through a default export.
    files: ['*.config.js', '*.config.ts', 'test/global-setup.ts'],
    rules: { 'no-restricted-syntax': 'off' },
  },
);
