mod endpoints;
mod limits;
mod metrics_exposition;
