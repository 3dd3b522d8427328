//! What the experiments stand on: child processes (servers, loads,
//! tracers), cells and quotas, samplers and syscall counts, the noise and
//! CPU-placement monitors, network namespaces and queues, the anchors
//! (nginx, redis, haproxy and their clients), the tools the lab installs,
//! and the machine's description.

pub mod anchors;
pub mod browser;
pub mod cell;
pub mod child;
pub mod interrupt;
pub mod lan;
pub mod load_child;
pub mod machine;
pub mod measure;
pub mod netns;
pub mod netq;
pub mod noise;
pub mod output;
pub mod placement;
pub mod quota;
pub mod sampler;
pub mod syscount;
pub mod tools;
