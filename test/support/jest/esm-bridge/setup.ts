/**
 * Loads the ESM-only Nest packages that CommonJS add-ons (nestjs-cls, @nestjs-cls/transactional)
 * require, and leaves them where the bridge files find them (see bridged.cjs).
 */
import * as common from '@nestjs/common';
import * as core from '@nestjs/core';
import * as unknownDependencies from '@nestjs/core/errors/exceptions/unknown-dependencies.exception.js';
import * as injector from '@nestjs/core/injector/injector.js';

const loaded: Record<string, object> = {
  '@nestjs/common': common,
  '@nestjs/core': core,
  '@nestjs/core/injector/injector': injector,
  '@nestjs/core/errors/exceptions/unknown-dependencies.exception': unknownDependencies,
};
for (const [request, namespace] of Object.entries(loaded)) {
  (globalThis as Record<symbol, unknown>)[Symbol.for(`nestjs-idempotency.jest.esm-bridge:${request}`)] = namespace;
}
