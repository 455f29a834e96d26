import { runOrmScenarios } from '../../helpers/orm-scenarios.js';

runOrmScenarios(require.resolve('../../fixtures/orm/pg.ts'));
