/** `require('@nestjs/core/injector/injector')` under Jest: see bridged.cjs. */
module.exports = require('./bridged.cjs').bridged('@nestjs/core/injector/injector');
