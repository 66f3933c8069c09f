export const REDIS = 'redis';
//# sourceMappingURL=index.js.map