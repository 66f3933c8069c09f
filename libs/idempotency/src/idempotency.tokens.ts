/** Injection token of the resolved module-wide settings (`ResolvedModuleSettings`). */
export const IDEMPOTENCY_SETTINGS = 'IDEMPOTENCY_SETTINGS';
/** Injection token of the global mode (`protectAllRoutes`), a static option of `forRoot()` / `forRootAsync()`. */
export const IDEMPOTENCY_PROTECT_ALL_ROUTES = 'IDEMPOTENCY_PROTECT_ALL_ROUTES';
