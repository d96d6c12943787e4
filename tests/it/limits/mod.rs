mod charge;
mod charge_body;
mod local;
mod reload;
mod reload_upstreams;
mod tiers_by_list;
