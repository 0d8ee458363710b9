// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

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
            {
              group: ['**/service/**', '**/control-plane/**', '**/bench/**'],
              message:
                'protocol/ imports rules/ only (rules <- protocol <- service <- control-plane).',
            },
            {
              group: ['**/rules/*', '!**/rules/index.js'],
              message: 'Import rules/ through its public index.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['service/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/control-plane/**', '**/bench/**'],
              message: 'Dependencies point one way: rules <- service <- control-plane.',
            },
            {
              group: ['**/rules/*', '!**/rules/index.js'],
              message: 'Import rules/ through its public index.',
            },
            {
              group: ['**/protocol/*', '!**/protocol/index.js'],
              message: 'Import protocol/ through its public index.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['control-plane/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['**/bench/**'], message: 'control-plane/ does not import benchmarks.' },
            {
              group: ['**/rules/*', '!**/rules/index.js'],
              message: 'Import rules/ through its public index.',
            },
            {
              group: ['**/service/*', '!**/service/index.js'],
              message: 'Import service/ through its public index.',
            },
            {
              group: ['**/protocol/*', '!**/protocol/index.js'],
              message: 'Import protocol/ through its public index.',
            },
          ],
        },
      ],
    },
  },
  {
    // Tool configuration files are loaded by their tools through a default export.
    files: ['*.config.js', '*.config.ts', 'test/global-setup.ts'],
    rules: { 'no-restricted-syntax': 'off' },
  },
);
